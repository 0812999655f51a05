/* The malloc family's edge cases and glibc's extensions, checked against what glibc does.
 *
 *   malloc_semantics [--objtier]
 *
 * tests/host/run builds this and runs it without LD_PRELOAD (proving each expectation below is
 * glibc's own behaviour on this host) and under libobjtier.so with --objtier, which adds the
 * checks that only hold for objtier (that __libc_malloc is ours, that malloc_trim releases the
 * page extents' cache, that the cache's idle memory goes back without a free, the malloc_info
 * header).
 *
 * Every failed check prints "FAIL: what" to stderr; the program then exits 1. It prints
 * "malloc semantics ok" and exits 0 only if all passed. Unlike stress.c it is single-threaded
 * and deterministic: it is about exact answers, not races.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/sysinfo.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* glibc's own entry points: exported by libc.so.6, declared in no public header. */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

/* A block stays valid after a *failed* realloc; gcc 12 cannot tell failure from success. */
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wuse-after-free"

static int failures;
static int objtier; /* --objtier: running under libobjtier.so */

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            failures++;                                                        \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                             \
            fprintf(stderr, " (%s:%d: %s)\n", __FILE__, __LINE__, #cond);      \
        }                                                                      \
    } while (0)

#define PAGE 4096UL

/* Opaque to the optimiser: gcc knows the malloc family's contracts and would fold the checks
 * (and warn about sizes it can see are too large). */
static volatile size_t size_max = SIZE_MAX;
static volatile size_t ptrdiff_max_plus_1 = (size_t)PTRDIFF_MAX + 1;
static volatile size_t half_size_max = SIZE_MAX / 2;

static inline void *launder(const void *p) {
    __asm__ volatile("" : "+r"(p));
    return (void *)p;
}

static int aligned_to(const void *p, size_t align) { return ((uintptr_t)launder(p) & (align - 1)) == 0; }

static unsigned char pattern(uint64_t tag, size_t i) { return (unsigned char)(tag * 131 + i * 7 + (i >> 8)); }

static void fill(unsigned char *p, size_t from, size_t to, uint64_t tag) {
    for (size_t i = from; i < to; i++) p[i] = pattern(tag, i);
}

/* Index of the first byte in [0, len) that does not hold the pattern, or len. */
static size_t first_bad(const unsigned char *p, size_t len, uint64_t tag) {
    p = launder(p);
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern(tag, i)) return i;
    return len;
}

static int all_zero(const unsigned char *p, size_t len) {
    p = launder(p);
    for (size_t i = 0; i < len; i++)
        if (p[i]) return 0;
    return 1;
}

/* glibc before 2.38 made aligned_alloc an alias of memalign. */
static int aligned_alloc_is_memalign(void) {
    int major = 0, minor = 0;
    sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor);
    return major < 2 || (major == 2 && minor < 38);
}

static void test_zero_and_usable_size(void) {
    void *a = malloc(0), *b = malloc(0);
    CHECK(a && b && a != b, "malloc(0) twice gave %p and %p, expected two distinct non-NULL pointers", a, b);
    free(a);
    free(b);
    a = calloc(0, 16);
    b = calloc(16, 0);
    CHECK(a && b && a != b, "calloc(0, 16) and calloc(16, 0) gave %p and %p, expected distinct non-NULL", a, b);
    free(a);
    free(b);
    a = realloc(NULL, 0);
    CHECK(a != NULL, "realloc(NULL, 0) returned NULL, expected malloc(0)'s non-NULL pointer");
    free(a);
    free(NULL);
    CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) = %zu, expected 0", malloc_usable_size(NULL));

    static const size_t sizes[] = {1, 8, 24, 100, 4095, 4096, 4097, 65536, 1 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        unsigned char *p = malloc(sizes[s]);
        CHECK(p != NULL, "malloc(%zu) returned NULL", sizes[s]);
        if (!p) continue;
        size_t usable = malloc_usable_size(p);
        CHECK(usable >= sizes[s], "malloc_usable_size(malloc(%zu)) = %zu, smaller than requested", sizes[s], usable);
        memset(p, 0x33, usable); /* the whole usable size may be written */
        free(p);
    }
}

static void test_huge_sizes(void) {
    struct {
        const char *what;
        size_t size;
    } huge[] = {{"SIZE_MAX", size_max}, {"PTRDIFF_MAX + 1", ptrdiff_max_plus_1}, {"SIZE_MAX / 2", half_size_max}};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        size_t n = huge[i].size;
        errno = 0;
        void *p = malloc(n);
        CHECK(p == NULL && errno == ENOMEM, "malloc(%s) gave %p, errno %d; expected NULL, ENOMEM", huge[i].what, p, errno);
        errno = 0;
        p = calloc(1, n);
        CHECK(p == NULL && errno == ENOMEM, "calloc(1, %s) gave %p, errno %d; expected NULL, ENOMEM", huge[i].what, p, errno);
        errno = 0;
        p = valloc(n);
        CHECK(p == NULL && errno == ENOMEM, "valloc(%s) gave %p, errno %d; expected NULL, ENOMEM", huge[i].what, p, errno);
        errno = 0;
        p = pvalloc(n);
        CHECK(p == NULL && errno == ENOMEM, "pvalloc(%s) gave %p, errno %d; expected NULL, ENOMEM", huge[i].what, p, errno);
        errno = 0;
        p = aligned_alloc(PAGE, n);
        CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(4096, %s) gave %p, errno %d; expected NULL, ENOMEM", huge[i].what, p, errno);
        errno = 0;
        p = memalign(64, n);
        CHECK(p == NULL && errno == ENOMEM, "memalign(64, %s) gave %p, errno %d; expected NULL, ENOMEM", huge[i].what, p, errno);
        void *out = (void *)0x1234;
        int rc = posix_memalign(&out, 64, n);
        CHECK(rc == ENOMEM && out == (void *)0x1234, "posix_memalign(64, %s) returned %d with out %p; expected ENOMEM, out untouched", huge[i].what, rc, out);

        /* A failed realloc leaves the block as it was, in both allocators' regions. */
        static const size_t starts[] = {100, 20000};
        for (size_t s = 0; s < 2; s++) {
            unsigned char *block = malloc(starts[s]);
            if (!block) continue;
            fill(block, 0, starts[s], 3);
            errno = 0;
            void *q = realloc(block, n);
            CHECK(q == NULL && errno == ENOMEM, "realloc(%zu-byte block, %s) gave %p, errno %d; expected NULL, ENOMEM", starts[s], huge[i].what, q, errno);
            CHECK(first_bad(block, starts[s], 3) == starts[s], "a failed realloc(%s) changed the %zu-byte block", huge[i].what, starts[s]);
            free(block);
        }
    }

    /* More than the machine could ever back: under the kernel's default (heuristic) overcommit
     * policy glibc's mmap is refused, and so must ours be, rather than succeed on paper. */
    FILE *policy = fopen("/proc/sys/vm/overcommit_memory", "r");
    int overcommit = -1;
    if (policy) {
        if (fscanf(policy, "%d", &overcommit) != 1)
            overcommit = -1;
        fclose(policy);
    }
    struct sysinfo si;
    size_t tebibyte = (size_t)1 << 40;
    if (overcommit == 0 && sysinfo(&si) == 0 &&
        ((unsigned long long)si.totalram + si.totalswap) * si.mem_unit < tebibyte / 2) {
        errno = 0;
        void *p = malloc(tebibyte);
        CHECK(p == NULL && errno == ENOMEM, "malloc(1 TiB) gave %p, errno %d; expected NULL, ENOMEM (overcommit_memory 0)", p, errno);
        free(p);
        errno = 0;
        p = calloc(1, tebibyte);
        CHECK(p == NULL && errno == ENOMEM, "calloc(1, 1 TiB) gave %p, errno %d; expected NULL, ENOMEM (overcommit_memory 0)", p, errno);
        free(p);
    }

    /* count * size overflows. */
    errno = 0;
    void *p = calloc(half_size_max, 3);
    CHECK(p == NULL && errno == ENOMEM, "calloc(SIZE_MAX / 2, 3) gave %p, errno %d; expected NULL, ENOMEM", p, errno);
    errno = 0;
    p = calloc(size_max, size_max);
    CHECK(p == NULL && errno == ENOMEM, "calloc(SIZE_MAX, SIZE_MAX) gave %p, errno %d; expected NULL, ENOMEM", p, errno);
    errno = 0;
    p = reallocarray(NULL, half_size_max, 3);
    CHECK(p == NULL && errno == ENOMEM, "reallocarray(NULL, SIZE_MAX / 2, 3) gave %p, errno %d; expected NULL, ENOMEM", p, errno);
    unsigned char *block = reallocarray(NULL, 10, 100);
    CHECK(block != NULL, "reallocarray(NULL, 10, 100) returned NULL");
    if (block) {
        fill(block, 0, 1000, 4);
        errno = 0;
        p = reallocarray(block, half_size_max, 3);
        CHECK(p == NULL && errno == ENOMEM, "reallocarray(block, SIZE_MAX / 2, 3) gave %p, errno %d; expected NULL, ENOMEM", p, errno);
        CHECK(first_bad(block, 1000, 4) == 1000, "a failed reallocarray changed the block");
        unsigned char *grown = reallocarray(block, 100, 100);
        CHECK(grown != NULL && first_bad(grown, 1000, 4) == 1000, "reallocarray(block, 100, 100) lost the contents");
        free(grown ? grown : block);
    }
}

static void test_realloc(void) {
    /* realloc(NULL, n) is malloc(n). */
    unsigned char *p = realloc(NULL, 5000);
    CHECK(p != NULL && malloc_usable_size(p) >= 5000, "realloc(NULL, 5000) did not allocate 5000 bytes");
    /* realloc(p, 0) frees p and returns NULL (glibc; C23 leaves it undefined). */
    void *r = realloc(p, 0);
    CHECK(r == NULL, "realloc(p, 0) returned %p; glibc frees p and returns NULL", r);
    p = malloc(10);
    r = realloc(p, 0);
    CHECK(r == NULL, "realloc(10-byte block, 0) returned %p; glibc frees it and returns NULL", r);

    /* Across the 4 KiB line between mimalloc and the page extents, both ways, several times:
     * every byte that both sizes cover must survive each move. */
    static const size_t steps[] = {16, 100, 4095, 4096, 4097, 65536, 3 << 20, 70000, 4097, 4095,
                                   200, 7, 10000, 8, 1 << 20, 4096, 1};
    size_t valid = 0;
    p = NULL;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t n = steps[i];
        unsigned char *q = realloc(p, n);
        CHECK(q != NULL, "realloc to %zu bytes returned NULL", n);
        if (!q) break;
        size_t keep = valid < n ? valid : n;
        size_t bad = first_bad(q, keep, 7);
        CHECK(bad == keep, "realloc from %zu to %zu bytes: byte %zu of %zu kept bytes is wrong", valid, n, bad, keep);
        CHECK(malloc_usable_size(q) >= n, "realloc to %zu bytes: usable size %zu", n, malloc_usable_size(q));
        fill(q, keep, n, 7); /* the same pattern on the new bytes, so any prefix verifies */
        valid = n;
        p = q;
    }
    free(p);
}

/* Arrays grown by a fixed step, in turn, as a simulation grows its per-atom arrays: each
 * array's pages are followed by another's, so many growths cannot happen in place. They must
 * keep their contents and, under objtier, must not move at every step: copying the whole array
 * each time makes the bytes copied grow with the square of its size. objtier leaves room to grow
 * after a move (35-36 moves here); copying at every step that could not grow in place was 70-102.
 * glibc is not held to the bound: it moves mmapped blocks without copying (mremap, 33 moves in
 * a fresh process), but after this program's earlier frees its mmap threshold is above these
 * arrays, and it copies them on the heap (102). */
static void test_growth_by_steps(void) {
    enum { ARRAYS = 4, STEPS = 252 };
    const size_t step = 256 << 10;
    size_t n = 1 << 20;
    unsigned char *a[ARRAYS];
    for (int j = 0; j < ARRAYS; j++) {
        a[j] = malloc(n);
        CHECK(a[j] != NULL, "malloc(1 MiB) returned NULL");
        if (!a[j]) return;
        fill(a[j], 0, n, 20 + j);
    }
    int moves = 0;
    for (int i = 0; i < STEPS; i++) {
        for (int j = 0; j < ARRAYS; j++) {
            unsigned char *q = realloc(a[j], n + step);
            CHECK(q != NULL, "realloc to %zu bytes returned NULL", n + step);
            if (!q) return;
            moves += q != a[j];
            fill(q, n, n + step, 20 + j);
            a[j] = q;
        }
        n += step;
    }
    for (int j = 0; j < ARRAYS; j++) {
        size_t bad = first_bad(a[j], n, 20 + j);
        CHECK(bad == n, "array %d grown by steps to %zu bytes: byte %zu is wrong", j, n, bad);
        free(a[j]);
    }
    if (objtier) CHECK(moves <= 60, "%d arrays grown by %d steps of 256 KiB to 64 MiB moved %d times; expected at most 60", ARRAYS, STEPS, moves);
}

static void test_alignment(void) {
    /* posix_memalign: the alignment must be a power of two multiple of sizeof(void *); EINVAL
     * is returned, errno and *out are left alone. */
    static const size_t bad[] = {0, 1, 2, 4, 3, 12, 24, 48, 4097, (size_t)1 << 63 | 8};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *out = (void *)0x1234;
        errno = EDOM;
        int rc = posix_memalign(&out, bad[i], 64);
        CHECK(rc == EINVAL, "posix_memalign(alignment %zu) returned %d, expected EINVAL", bad[i], rc);
        CHECK(errno == EDOM, "posix_memalign(alignment %zu) changed errno to %d", bad[i], errno);
        CHECK(out == (void *)0x1234, "posix_memalign(alignment %zu) wrote *out on failure", bad[i]);
    }

    /* Every power of two from 8 bytes to 1 MiB, with sizes on both sides of 4 KiB. */
    static const size_t sizes[] = {1, 100, 4096, 5000, 1 << 20};
    for (size_t align = 8; align <= (1 << 20); align *= 2) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t n = sizes[s];
            void *ps[3] = {NULL, NULL, NULL};
            int rc = posix_memalign(&ps[0], align, n);
            CHECK(rc == 0, "posix_memalign(%zu, %zu) returned %d", align, n, rc);
            ps[1] = memalign(align, n);
            ps[2] = aligned_alloc(align, n);
            static const char *names[] = {"posix_memalign", "memalign", "aligned_alloc"};
            for (int k = 0; k < 3; k++) {
                CHECK(ps[k] != NULL && aligned_to(ps[k], align), "%s(%zu, %zu) gave %p, not aligned", names[k], align, n, ps[k]);
                if (!ps[k]) continue;
                CHECK(malloc_usable_size(ps[k]) >= n, "%s(%zu, %zu): usable size %zu", names[k], align, n, malloc_usable_size(ps[k]));
                memset(ps[k], 0xCC, n);
                free(ps[k]);
            }
        }
    }

    /* memalign rounds a non-power-of-two alignment up and treats 0 as none... */
    void *m = memalign(48, 100);
    CHECK(m != NULL && aligned_to(m, 64), "memalign(48, 100) gave %p, expected a 64-byte aligned block", m);
    free(m);
    m = memalign(0, 100);
    CHECK(m != NULL, "memalign(0, 100) returned NULL, expected a plain block");
    free(m);
    /* ...but fails with EINVAL above the largest power of two. */
    errno = 0;
    m = memalign(half_size_max + 2, 1);
    CHECK(m == NULL && errno == EINVAL, "memalign(SIZE_MAX / 2 + 2, 1) gave %p, errno %d; expected NULL, EINVAL", m, errno);

    /* aligned_alloc with a non-power-of-two alignment: memalign's answer before glibc 2.38,
     * NULL and EINVAL from 2.38 on. */
    static const size_t odd[] = {0, 48, 100};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        errno = 0;
        void *a = aligned_alloc(odd[i], 100);
        if (aligned_alloc_is_memalign()) {
            size_t rounded = 1;
            while (rounded < odd[i]) rounded *= 2;
            CHECK(a != NULL && aligned_to(a, rounded), "glibc %s: aligned_alloc(%zu, 100) gave %p, expected memalign's %zu-aligned block", gnu_get_libc_version(), odd[i], a, rounded);
        } else {
            CHECK(a == NULL && errno == EINVAL, "glibc %s: aligned_alloc(%zu, 100) gave %p, errno %d; expected NULL, EINVAL", gnu_get_libc_version(), odd[i], a, errno);
        }
        free(a);
    }

    /* valloc and pvalloc: page aligned; pvalloc's size rounded up to whole pages. */
    static const size_t page_sizes[] = {1, 100, 4096, 4097, 10000, 1 << 20};
    for (size_t s = 0; s < sizeof page_sizes / sizeof page_sizes[0]; s++) {
        size_t n = page_sizes[s], rounded = (n + PAGE - 1) / PAGE * PAGE;
        void *v = valloc(n);
        CHECK(v != NULL && aligned_to(v, PAGE), "valloc(%zu) gave %p, not page aligned", n, v);
        CHECK(!v || malloc_usable_size(v) >= n, "valloc(%zu): usable size %zu", n, malloc_usable_size(v));
        if (v) memset(v, 0x11, n);
        free(v);
        void *pv = pvalloc(n);
        CHECK(pv != NULL && aligned_to(pv, PAGE), "pvalloc(%zu) gave %p, not page aligned", n, pv);
        CHECK(!pv || malloc_usable_size(pv) >= rounded, "pvalloc(%zu): usable size %zu, expected at least %zu", n, malloc_usable_size(pv), rounded);
        if (pv) memset(pv, 0x22, rounded);
        free(pv);
    }
}

static void test_libc_names(void) {
    /* Blocks from glibc's internal names and from the public ones must mix freely. */
    unsigned char *p = __libc_malloc(100);
    CHECK(p != NULL, "__libc_malloc(100) returned NULL");
    if (p) {
        fill(p, 0, 100, 11);
        unsigned char *q = realloc(p, 10000);
        CHECK(q != NULL && first_bad(q, 100, 11) == 100, "realloc of a __libc_malloc block lost its contents");
        free(q ? q : p);
    }
    p = malloc(300);
    __libc_free(p);
    p = __libc_calloc(10, 1000);
    CHECK(p != NULL && all_zero(p, 10000), "__libc_calloc(10, 1000) did not give 10000 zero bytes");
    if (p) {
        fill(p, 0, 10000, 12);
        unsigned char *q = __libc_realloc(p, 50);
        CHECK(q != NULL && first_bad(q, 50, 12) == 50, "__libc_realloc(10000-byte block, 50) lost its contents");
        free(q ? q : p);
    }
    errno = 0;
    p = __libc_calloc(half_size_max, 3);
    CHECK(p == NULL && errno == ENOMEM, "__libc_calloc(SIZE_MAX / 2, 3) gave %p, errno %d; expected NULL, ENOMEM", p, errno);
    p = __libc_memalign(4096, 100);
    CHECK(p != NULL && aligned_to(p, 4096), "__libc_memalign(4096, 100) gave %p", p);
    free(p);
    p = __libc_valloc(100);
    CHECK(p != NULL && aligned_to(p, PAGE), "__libc_valloc(100) gave %p", p);
    free(p);
    p = __libc_pvalloc(100);
    CHECK(p != NULL && aligned_to(p, PAGE) && malloc_usable_size(p) >= PAGE, "__libc_pvalloc(100) gave %p", p);
    free(p);
    if (objtier) {
        /* Ours puts a 10000-byte object on whole pages of its own; glibc's heap would not. */
        p = __libc_malloc(10000);
        size_t usable = malloc_usable_size(p);
        CHECK(p && aligned_to(p, PAGE) && usable % PAGE == 0, "__libc_malloc(10000) gave %p with usable size %zu: not objtier's page extent (is __libc_malloc still glibc's?)", p, usable);
        free(p);
    }
}

static void test_tuning_and_statistics(void) {
    /* mallopt: glibc accepts every parameter (unknown ones included) and returns 1, except an
     * M_MXFAST beyond its largest fast bin. */
    struct {
        const char *name;
        int param, value, expected;
    } opts[] = {
        {"M_TRIM_THRESHOLD", M_TRIM_THRESHOLD, 128 * 1024, 1},
        {"M_TOP_PAD", M_TOP_PAD, 0, 1},
        {"M_MMAP_THRESHOLD", M_MMAP_THRESHOLD, 128 * 1024, 1},
        {"M_MMAP_MAX", M_MMAP_MAX, 65536, 1},
        {"M_ARENA_MAX", M_ARENA_MAX, 8, 1},
        {"M_ARENA_TEST", M_ARENA_TEST, 8, 1},
        {"M_PERTURB", M_PERTURB, 0, 1},
        {"M_MXFAST", M_MXFAST, 64, 1},
        {"M_MXFAST (too large)", M_MXFAST, 80 * (int)sizeof(size_t) / 4 + 1, 0},
        {"M_MXFAST (negative)", M_MXFAST, -1, 0},
        {"an unknown parameter", 12345, 1, 1},
    };
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        int rc = mallopt(opts[i].param, opts[i].value);
        CHECK(rc == opts[i].expected, "mallopt(%s, %d) returned %d, expected %d", opts[i].name, opts[i].value, rc, opts[i].expected);
    }

    /* mallinfo2/mallinfo: a live 40 MiB block is above glibc's largest mmap threshold (32 MiB),
     * so it is mmapped there and a tracked object here: both count it in hblkhd. */
    void *big = malloc(40 << 20);
    CHECK(big != NULL, "malloc(40 MiB) returned NULL");
    struct mallinfo2 info2 = mallinfo2();
    CHECK(info2.hblkhd >= (40 << 20), "mallinfo2().hblkhd = %zu with a live 40 MiB block", info2.hblkhd);
    CHECK(info2.uordblks > 0 && info2.arena >= info2.uordblks, "mallinfo2(): arena %zu, uordblks %zu", info2.arena, info2.uordblks);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    struct mallinfo info = mallinfo();
#pragma GCC diagnostic pop
    CHECK(info.hblkhd >= (40 << 20), "mallinfo().hblkhd = %d with a live 40 MiB block", info.hblkhd);
    free(big);

    /* malloc_trim: 0 or 1. Under objtier, freed 64 KiB blocks stay resident in the page
     * extents' cache, so trimming must release something. */
    void *blocks[32];
    for (int i = 0; i < 32; i++) {
        blocks[i] = malloc(65536);
        if (blocks[i]) memset(blocks[i], 0x44, 65536);
    }
    for (int i = 0; i < 32; i++) free(blocks[i]);
    int trimmed = malloc_trim(0);
    CHECK(trimmed == 0 || trimmed == 1, "malloc_trim(0) returned %d", trimmed);
    if (objtier) CHECK(trimmed == 1, "malloc_trim(0) released nothing after 2 MiB of tracked frees");

    /* malloc_stats writes to stderr: capture it. */
    FILE *captured = tmpfile();
    CHECK(captured != NULL, "tmpfile() failed");
    if (captured) {
        fflush(stderr);
        int saved = dup(2);
        dup2(fileno(captured), 2);
        malloc_stats();
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        char text[512] = {0};
        rewind(captured);
        size_t len = fread(text, 1, sizeof text - 1, captured);
        CHECK(len > 0, "malloc_stats() wrote nothing to stderr");
        if (objtier) CHECK(strstr(text, "malloc_stats:") != NULL, "malloc_stats() wrote %.80s", text);
        fclose(captured);
    }

    /* malloc_info: XML into a FILE (here an open_memstream, whose buffer is itself malloc'd);
     * any options but 0 is EINVAL. */
    char *xml = NULL;
    size_t xml_len = 0;
    FILE *stream = open_memstream(&xml, &xml_len);
    CHECK(stream != NULL, "open_memstream failed");
    if (stream) {
        int rc = malloc_info(0, stream);
        CHECK(rc == 0, "malloc_info(0, stream) returned %d", rc);
        rc = malloc_info(1, stream);
        CHECK(rc == EINVAL, "malloc_info(1, stream) returned %d, expected EINVAL", rc);
        fclose(stream);
        CHECK(xml && strncmp(xml, "<malloc version=\"", 17) == 0, "malloc_info wrote %.60s", xml ? xml : "nothing");
        CHECK(xml && strstr(xml, "</malloc>") != NULL, "malloc_info's XML is not closed: %.200s", xml ? xml : "");
        if (objtier) CHECK(xml && strstr(xml, "version=\"objtier-1\""), "malloc_info is not objtier's: %.60s", xml ? xml : "");
        free(xml);
    }
}

/* Resident anonymous memory of this process, in KiB (-1 if unknown). Read with open and read,
 * not stdio, so that reading it allocates and frees nothing. */
static long rss_anon_kib(void) {
    static char text[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    if (fd < 0) return -1;
    ssize_t len = read(fd, text, sizeof text - 1);
    close(fd);
    if (len <= 0) return -1;
    text[len] = 0;
    const char *line = strstr(text, "RssAnon:");
    long kib = -1;
    if (line) sscanf(line, "RssAnon: %ld kB", &kib);
    return kib;
}

/* Caches 32 MiB of freed tracked memory that later allocations cannot reuse whole: every other
 * one of 1,024 blocks of 64 KiB (the live ones keep the freed ones apart). Returns RssAnon. */
static void *cache_blocks[1024];
static long cache_32_mib(void) {
    for (int i = 0; i < 1024; i++) {
        cache_blocks[i] = malloc(65536);
        if (cache_blocks[i]) memset(cache_blocks[i], 0x55, 65536);
    }
    for (int i = 0; i < 1024; i += 2) free(cache_blocks[i]);
    return rss_anon_kib();
}

static void uncache(void) {
    for (int i = 1; i < 1024; i += 2) free(cache_blocks[i]);
    malloc_trim(0);
}

/* Under objtier: freed tracked memory waits in a cache for reuse, and what stays idle for a
 * quarter of a second goes back to the kernel, also when the program frees nothing more: from
 * its tracked allocations, or from mimalloc's heartbeat when it allocates only small objects. */
static void test_idle_cache_returned(void) {
    if (!objtier) return;
    enum { KEPT = 20000 };
    static void *kept[KEPT];
    for (int phase = 0; phase < 2; phase++) {
        const char *what = phase == 0 ? "tracked allocations of 256 KiB" : "small allocations";
        long cached = cache_32_mib(), now = cached;
        int n = 0;
        /* Allocations only, no frees, for up to 3 s. */
        for (int round = 0; round < 300 && n < KEPT && cached - now < 24 * 1024; round++) {
            for (int i = 0; i < (phase == 0 ? 1 : 60) && n < KEPT; i++, n++) {
                kept[n] = malloc(phase == 0 ? 262144 : 16 + (size_t)(n * 37) % 1000);
                if (kept[n]) memset(kept[n], 1, 16);
            }
            usleep(10000);
            now = rss_anon_kib();
        }
        CHECK(cached - now >= 24 * 1024, "32 MiB of freed 64 KiB blocks still resident after %d %s: RssAnon %ld kB, was %ld kB", n, what, now, cached);
        for (int i = 0; i < n; i++) free(kept[i]);
        uncache();
    }
}

/* The VmFlags line of the mapping that holds `p`, from /proc/self/smaps, or "" if not found. */
static void vm_flags_of(const void *p, char *out, size_t len) {
    out[0] = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return;
    char line[512];
    int inside = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            snprintf(out, len, "%.*s", (int)(len - 1), line + 8);
            break;
        }
    }
    fclose(f);
}

/* A process's first objects, small and tracked, lie in memory kept off transparent huge pages
 * (MADV_NOHUGEPAGE, "nh" in smaps): under transparent_hugepage=always the first touch would
 * otherwise make 2 MiB resident for each, in the fast tier, where first touch puts it. Run
 * first, before the other tests allocate. */
static void test_first_objects_off_huge_pages(void) {
    if (!objtier || access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0) return;
    void *small = malloc(64), *tracked = malloc(8192);
    CHECK(small && tracked, "malloc(64) and malloc(8192)");
    if (!small || !tracked) return;
    CHECK(((uintptr_t)tracked & ((1UL << 30) - 1)) < (2UL << 20),
          "the first tracked object %p starts in its chunk's first 2 MiB", tracked);
    char flags[256];
    vm_flags_of(small, flags, sizeof flags);
    CHECK(strstr(flags, " nh") != NULL, "a small object's arena is MADV_NOHUGEPAGE (VmFlags:%s)", flags);
    vm_flags_of(tracked, flags, sizeof flags);
    CHECK(strstr(flags, " nh") != NULL, "the first tracked object's pages are MADV_NOHUGEPAGE (VmFlags:%s)", flags);
    free(small);
    free(tracked);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--objtier") == 0) {
            objtier = 1;
        } else {
            fprintf(stderr, "usage: malloc_semantics [--objtier]\n");
            return 2;
        }
    }
    test_first_objects_off_huge_pages();
    test_zero_and_usable_size();
    test_huge_sizes();
    test_realloc();
    test_growth_by_steps();
    test_alignment();
    test_libc_names();
    test_tuning_and_statistics();
    test_idle_cache_returned();
    if (failures) {
        fprintf(stderr, "malloc_semantics: %d check(s) failed\n", failures);
        return 1;
    }
    printf("malloc semantics ok\n");
    return 0;
}
