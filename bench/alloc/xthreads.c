/* xthreads: several threads allocate and free blocks of random sizes (16 B .. 64 KiB, mostly
 * small); a quarter of the blocks are handed to whichever thread next visits a shared exchange
 * array, so they are freed by a different thread than the one that allocated them.
 * Usage: xthreads [threads] [ops-per-thread]. Prints a checksum of what was allocated (it depends
 * only on the seed) and the number of corrupted bytes found when blocks were freed (must be 0). */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>

#define LOCAL_SLOTS 1024
#define SHARED_SLOTS 1024

struct block {
    size_t size; /* including this header */
    uint64_t tag;
};

static _Atomic(struct block *) shared[SHARED_SLOTS];
static long ops_per_thread = 3000000;

struct result {
    int index; /* the worker's seed is derived from it */
    uint64_t checksum;
    unsigned long errors;
};

static size_t draw_size(uint64_t *rng) {
    uint64_t r = rng_below(rng, 100);
    if (r < 80) return rng_range(rng, 16, 256);
    if (r < 95) return rng_range(rng, 257, 4095);
    return rng_log_range(rng, 4096, 65536);
}

static unsigned long release(struct block *b) {
    unsigned long bad = pattern_check_sparse((unsigned char *)b + sizeof *b, b->size - sizeof *b,
                                             b->tag);
    free(b);
    return bad;
}

static void *worker(void *arg) {
    struct result *result = arg;
    uint64_t rng = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)result->index + 1) * 7919;
    struct block *local[LOCAL_SLOTS] = {0};
    for (long op = 0; op < ops_per_thread; op++) {
        size_t size = draw_size(&rng);
        if (size < sizeof(struct block) + 1) size = sizeof(struct block) + 1;
        struct block *b = xmalloc(size);
        b->size = size;
        b->tag = rng_next(&rng);
        pattern_fill_sparse((unsigned char *)b + sizeof *b, size - sizeof *b, b->tag);
        result->checksum += size ^ b->tag;
        if (rng_below(&rng, 4) == 0) {
            struct block *old = atomic_exchange(&shared[rng_below(&rng, SHARED_SLOTS)], b);
            if (old) result->errors += release(old);
        } else {
            size_t slot = rng_below(&rng, LOCAL_SLOTS);
            if (local[slot]) result->errors += release(local[slot]);
            local[slot] = b;
        }
    }
    for (size_t i = 0; i < LOCAL_SLOTS; i++)
        if (local[i]) result->errors += release(local[i]);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2) ops_per_thread = atol(argv[2]);
    if (threads < 1 || threads > 256 || ops_per_thread < 1) {
        fprintf(stderr, "usage: xthreads [threads 1..256] [ops-per-thread]\n");
        return 2;
    }
    pthread_t ids[256];
    struct result results[256];
    memset(results, 0, sizeof results);
    for (int t = 0; t < threads; t++) {
        results[t].index = t;
        if (pthread_create(&ids[t], NULL, worker, &results[t]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    uint64_t checksum = 0;
    unsigned long errors = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(ids[t], NULL);
        checksum += results[t].checksum;
        errors += results[t].errors;
    }
    for (size_t i = 0; i < SHARED_SLOTS; i++) {
        struct block *b = atomic_load(&shared[i]);
        if (b) errors += release(b);
    }
    printf("xthreads threads=%d ops=%ld checksum=%016llx errors=%lu\n", threads, ops_per_thread,
           (unsigned long long)checksum, errors);
    return errors != 0;
}
