/* realloc-growth: buffers grown by realloc from 16 B to several MiB, the way vectors, string
 * builders and read buffers grow: by doubling (to 8 MiB), by half (to 6 MiB), by an eighth
 * (to 4 MiB) and by a fixed 64 KiB step (to 2 MiB). The four buffers grow in turn, so each
 * realloc has neighbours in the way. After every step the old contents are checked at one byte
 * per page and at the edges, and the new part is filled.
 * Usage: realloc-growth [rounds]. Prints a checksum of the checked bytes and the number of
 * mismatches (must be 0). */
#include "common.h"

struct growth {
    const char *name;
    size_t limit;
    unsigned num, den; /* next = size * num / den, or size + step when num is 0 */
    size_t step;
    unsigned char *data;
    size_t size;
};

static unsigned long errors;
static uint64_t checksum;

/* Checks the bytes [0, size) that fill_range wrote, sparsely. */
static void check(const struct growth *g, uint64_t tag) {
    const unsigned char *p = g->data;
    for (size_t i = 0; i < g->size; i += 4093) {
        errors += p[i] != pattern_byte(tag, i);
        checksum += p[i];
    }
    errors += p[g->size - 1] != pattern_byte(tag, g->size - 1);
}

/* Fills [from, to) completely: a grown buffer is written, as a real one would be. */
static void fill_range(unsigned char *p, size_t from, size_t to, uint64_t tag) {
    for (size_t i = from; i < to; i++) p[i] = pattern_byte(tag, i);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    if (rounds < 1) {
        fprintf(stderr, "usage: realloc-growth [rounds >= 1]\n");
        return 2;
    }
    struct growth buffers[] = {
        {"double", 8 << 20, 2, 1, 0, NULL, 0},
        {"half", 6 << 20, 3, 2, 0, NULL, 0},
        {"eighth", 4 << 20, 9, 8, 0, NULL, 0},
        {"step", 2 << 20, 0, 0, 64 << 10, NULL, 0},
    };
    const size_t count = sizeof buffers / sizeof buffers[0];
    unsigned long reallocs = 0;
    for (int round = 0; round < rounds; round++) {
        int growing = (int)count;
        for (size_t b = 0; b < count; b++) {
            buffers[b].size = 16;
            buffers[b].data = xmalloc(16);
            fill_range(buffers[b].data, 0, 16, (uint64_t)round * 8 + b);
        }
        while (growing > 0) {
            growing = 0;
            for (size_t b = 0; b < count; b++) {
                struct growth *g = &buffers[b];
                uint64_t tag = (uint64_t)round * 8 + b;
                if (g->size >= g->limit) continue;
                growing++;
                size_t next = g->num ? g->size * g->num / g->den : g->size + g->step;
                if (next <= g->size) next = g->size + 16;
                if (next > g->limit) next = g->limit;
                unsigned char *p = realloc(g->data, next);
                if (!p) {
                    fprintf(stderr, "realloc(%zu) failed\n", next);
                    return 1;
                }
                reallocs++;
                g->data = p;
                check(g, tag);
                fill_range(p, g->size, next, tag);
                g->size = next;
            }
        }
        for (size_t b = 0; b < count; b++) {
            check(&buffers[b], (uint64_t)round * 8 + b);
            free(buffers[b].data);
        }
    }
    printf("realloc-growth rounds=%d reallocs=%lu checksum=%016llx errors=%lu\n", rounds, reallocs,
           (unsigned long long)checksum, errors);
    return errors != 0;
}
