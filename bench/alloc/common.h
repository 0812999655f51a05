/* Shared helpers for the allocator workloads: a seeded PRNG, size distributions and content
 * patterns. Every workload prints a checksum that depends only on its seed, never on where the
 * allocator put things, so the same line must come out under every allocator. */
#ifndef BENCH_ALLOC_COMMON_H
#define BENCH_ALLOC_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* xorshift64*: fast, and the same sequence on every run for the same seed. */
static inline uint64_t rng_next(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static inline uint64_t rng_below(uint64_t *state, uint64_t n) { return rng_next(state) % n; }

/* Uniform in [lo, hi]. */
static inline size_t rng_range(uint64_t *state, size_t lo, size_t hi) {
    return lo + (size_t)rng_below(state, (uint64_t)(hi - lo + 1));
}

/* Log-uniform in [lo, hi]: as many objects between 4 and 8 KiB as between 512 KiB and 1 MiB. */
static inline size_t rng_log_range(uint64_t *state, size_t lo, size_t hi) {
    unsigned lo_bits = 63 - __builtin_clzll(lo), hi_bits = 63 - __builtin_clzll(hi);
    unsigned bits = lo_bits + (unsigned)rng_below(state, hi_bits - lo_bits + 1);
    size_t base = (size_t)1 << bits;
    size_t size = base + (size_t)rng_below(state, base);
    return size < lo ? lo : size > hi ? hi : size;
}

/* The byte a block tagged `tag` holds at offset `i`. */
static inline unsigned char pattern_byte(uint64_t tag, size_t i) {
    return (unsigned char)((tag * 0x9E3779B97F4A7C15ULL + i * 131) >> 56);
}

/* Writes the block's pattern at its first 16 bytes, one byte per 4 KiB page and its last byte:
 * every page is touched (so page faults and resident memory count) without turning the
 * benchmark into a memset benchmark. */
static inline void pattern_fill_sparse(unsigned char *p, size_t size, uint64_t tag) {
    size_t head = size < 16 ? size : 16;
    for (size_t i = 0; i < head; i++) p[i] = pattern_byte(tag, i);
    for (size_t i = 4096; i < size; i += 4096) p[i] = pattern_byte(tag, i);
    p[size - 1] = pattern_byte(tag, size - 1);
}

/* Returns the number of mismatching bytes among those pattern_fill_sparse wrote. */
static inline unsigned long pattern_check_sparse(const unsigned char *p, size_t size, uint64_t tag) {
    unsigned long bad = 0;
    size_t head = size < 16 ? size : 16;
    for (size_t i = 0; i < head; i++) bad += p[i] != pattern_byte(tag, i);
    for (size_t i = 4096; i < size; i += 4096) bad += p[i] != pattern_byte(tag, i);
    bad += p[size - 1] != pattern_byte(tag, size - 1);
    return bad;
}

static inline void *xmalloc(size_t size) {
    void *p = malloc(size);
    if (!p) {
        fprintf(stderr, "malloc(%zu) failed\n", size);
        exit(1);
    }
    return p;
}

#endif
