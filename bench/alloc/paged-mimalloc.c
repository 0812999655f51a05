/* paged-mimalloc: Debian's mimalloc, asked for libobjtier's layout. A reference configuration of
 * bench/alloc/run, not an allocator to use.
 *
 * libobjtier gives every object it tracks pages of its own, so that the daemon can move it between
 * tiers alone: objects of at least 4 KiB (OBJTIER_TRACK_MIN's default) whose rounding up to whole
 * pages wastes at most 25 % of them (OBJTIER_TRACK_MAX_WASTE's default) start on a page boundary
 * and end on one. This shim makes mimalloc do the same for malloc, calloc and realloc, with
 * mimalloc's own aligned allocation, so that the benchmark can tell the price of that layout
 * (which any allocator would pay: a rounded-up object touches more memory, and more pages are
 * faulted in) from the price of libobjtier's implementation of it.
 *
 * Preloaded before mimalloc itself, which serves everything else (free, posix_memalign,
 * malloc_usable_size, C++ new and delete):
 *   LD_PRELOAD="libpaged-mimalloc.so /usr/lib/x86_64-linux-gnu/libmimalloc.so.2" program
 * Build: gcc -O2 -shared -fPIC -o libpaged-mimalloc.so paged-mimalloc.c \
 *            /usr/lib/x86_64-linux-gnu/libmimalloc.so.2 */
#include <stddef.h>
#include <stdint.h>

#define PAGE 4096
#define TRACK_MIN 4096
#define MAX_WASTE_PERCENT 25

void *mi_malloc(size_t size);
void *mi_calloc(size_t count, size_t size);
void *mi_realloc(void *p, size_t size);
void *mi_malloc_aligned(size_t size, size_t alignment);
void *mi_zalloc_aligned(size_t size, size_t alignment);
void *mi_realloc_aligned(void *p, size_t size, size_t alignment);

/* The page-rounded size of an object libobjtier would track, or 0 for one it would not. */
static size_t paged(size_t size) {
    if (size < TRACK_MIN || size > SIZE_MAX - PAGE) return 0;
    size_t rounded = (size + PAGE - 1) / PAGE * PAGE;
    return (rounded - size) * 100 <= rounded * MAX_WASTE_PERCENT ? rounded : 0;
}

void *malloc(size_t size) {
    size_t rounded = paged(size);
    return rounded ? mi_malloc_aligned(rounded, PAGE) : mi_malloc(size);
}

void *calloc(size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) return mi_calloc(count, size); /* ENOMEM */
    size_t rounded = paged(total);
    return rounded ? mi_zalloc_aligned(rounded, PAGE) : mi_calloc(count, size);
}

void *realloc(void *p, size_t size) {
    size_t rounded = paged(size);
    return rounded ? mi_realloc_aligned(p, rounded, PAGE) : mi_realloc(p, size);
}
