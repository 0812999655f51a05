/* mixed: a sliding window of live blocks, nine in ten small (16 B .. 4 KiB) and one in ten large
 * (4 KiB .. 1 MiB, log-uniform), each written in full when allocated. Every step allocates one
 * block into a random slot of the window, first checking and freeing the block there, so
 * lifetimes are random (geometric, a window's length on average).
 * Usage: mixed [steps] [window]. Prints a checksum of the checked bytes and the number of
 * mismatches (must be 0). */
#include "common.h"

struct block {
    unsigned char *data;
    size_t size;
    uint64_t tag;
};

static unsigned long errors;
static uint64_t checksum;

static void release(struct block *b) {
    if (!b->data) return;
    errors += pattern_check_sparse(b->data, b->size, b->tag);
    checksum += b->data[b->size / 2];
    free(b->data);
    b->data = NULL;
}

int main(int argc, char **argv) {
    long steps = argc > 1 ? atol(argv[1]) : 400000;
    long window = argc > 2 ? atol(argv[2]) : 2000;
    if (steps < 1 || window < 1) {
        fprintf(stderr, "usage: mixed [steps >= 1] [window >= 1]\n");
        return 2;
    }
    struct block *slots = calloc((size_t)window, sizeof *slots);
    if (!slots) return 1;
    uint64_t rng = 0x5EED0003;
    for (long step = 0; step < steps; step++) {
        struct block *b = &slots[rng_below(&rng, (uint64_t)window)];
        release(b);
        b->size = rng_below(&rng, 10) == 0 ? rng_log_range(&rng, 4096, 1 << 20)
                                            : rng_range(&rng, 16, 4095);
        b->tag = rng_next(&rng);
        b->data = xmalloc(b->size);
        /* Written in full (a constant, so the allocator's work is not drowned by the pattern),
         * then the sparse pattern on top for checking. */
        memset(b->data, (int)(b->tag & 0xff), b->size);
        pattern_fill_sparse(b->data, b->size, b->tag);
        checksum += b->size;
    }
    for (long i = 0; i < window; i++) release(&slots[i]);
    free(slots);
    printf("mixed steps=%ld window=%ld checksum=%016llx errors=%lu\n", steps, window,
           (unsigned long long)checksum, errors);
    return errors != 0;
}
