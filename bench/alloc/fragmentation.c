/* fragmentation: rounds of allocation whose size mix changes from round to round (small, then
 * medium, then large objects), so the holes one round leaves rarely fit the next. Each round
 * allocates a batch, frees a random half of it at once, and frees the other half at the end of
 * the next round, except one object in sixteen, which lives to the end: a long-lived set that
 * grows all run and pins the pages around it. Peak RSS is the number to watch here.
 * Usage: fragmentation [rounds] [batch]. Prints a checksum and the number of mismatches found
 * when objects were freed (must be 0). */
#include "common.h"

struct object {
    unsigned char *data;
    size_t size;
    uint64_t tag;
};

static unsigned long errors;
static uint64_t checksum;

static void release(struct object *o) {
    if (!o->data) return;
    errors += pattern_check_sparse(o->data, o->size, o->tag);
    free(o->data);
    o->data = NULL;
}

/* The size mix of a round: rounds cycle through four shapes. */
static size_t draw_size(uint64_t *rng, int round) {
    switch (round % 4) {
    case 0: return rng_range(rng, 16, 512);
    case 1: return rng_log_range(rng, 256, 8192);
    case 2: return rng_range(rng, 24, 160);
    default: return rng_log_range(rng, 2048, 32768);
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 80;
    long batch = argc > 2 ? atol(argv[2]) : 20000;
    if (rounds < 1 || batch < 2) {
        fprintf(stderr, "usage: fragmentation [rounds >= 1] [batch >= 2]\n");
        return 2;
    }
    struct object *current = calloc((size_t)batch, sizeof *current);
    struct object *previous = calloc((size_t)batch, sizeof *previous);
    long kept_capacity = (long)rounds * (batch / 16 + 1) + 1, kept_count = 0;
    struct object *kept = calloc((size_t)kept_capacity, sizeof *kept);
    if (!current || !previous || !kept) return 1;
    uint64_t rng = 0x5EED0004;
    for (int round = 0; round < rounds; round++) {
        for (long i = 0; i < batch; i++) {
            struct object *o = &current[i];
            o->size = draw_size(&rng, round);
            o->tag = rng_next(&rng);
            o->data = xmalloc(o->size);
            pattern_fill_sparse(o->data, o->size, o->tag);
            checksum += o->size ^ o->tag;
        }
        /* A random half dies young. */
        for (long i = 0; i < batch; i++)
            if (rng_below(&rng, 2)) release(&current[i]);
        /* Last round's survivors die now, but one in sixteen joins the long-lived set. */
        for (long i = 0; i < batch; i++) {
            if (!previous[i].data) continue;
            if (rng_below(&rng, 16) == 0 && kept_count < kept_capacity)
                kept[kept_count++] = previous[i], previous[i].data = NULL;
            else
                release(&previous[i]);
        }
        struct object *swap = previous;
        previous = current;
        current = swap;
    }
    for (long i = 0; i < batch; i++) release(&previous[i]);
    for (long i = 0; i < kept_count; i++) release(&kept[i]);
    printf("fragmentation rounds=%d batch=%ld kept=%ld checksum=%016llx errors=%lu\n", rounds,
           batch, kept_count, (unsigned long long)checksum, errors);
    free(current);
    free(previous);
    free(kept);
    return errors != 0;
}
