/*
 * A program steady at its high-water mark: it holds a set of objects of 1 B to 50 KB and, round
 * after round, frees half of them at once and allocates their replacements, writing every byte
 * (a runtime's cleaner freeing the buffers its workers replace). Its live bytes never fall far
 * below their peak, so the library's cache of freed pages must make room beyond that peak for
 * the replacements to reuse the pages just freed rather than fault in new ones.
 *
 *   steady_churn [OBJECTS [ROUNDS]]
 *
 * OBJECTS (default 8000) live objects, ROUNDS (default 40) rounds. Checks every object's
 * contents when it is freed, and prints
 *   churn ok faults F pages P
 * with F the minor page faults during the rounds and P the pages the replacements span.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

struct object {
    unsigned char *data;
    size_t size;
    unsigned char tag;
};

static uint64_t rng = 0x5EED0005;

static uint64_t next(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return rng >> 33;
}

static long minor_faults(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

static int make(struct object *o) {
    o->size = 1 + next() % 50000;
    o->tag = (unsigned char)next();
    o->data = malloc(o->size);
    if (!o->data) return -1;
    memset(o->data, o->tag, o->size);
    return 0;
}

/* Frees o after checking its first, middle and last bytes: 1 if they are wrong. */
static int release(struct object *o) {
    size_t last = o->size - 1;
    int bad = o->data[0] != o->tag || o->data[last / 2] != o->tag || o->data[last] != o->tag;
    free(o->data);
    o->data = NULL;
    return bad;
}

int main(int argc, char **argv) {
    long count = argc > 1 ? atol(argv[1]) : 8000;
    long rounds = argc > 2 ? atol(argv[2]) : 40;
    if (count < 2 || rounds < 1) {
        fprintf(stderr, "usage: steady_churn [OBJECTS >= 2 [ROUNDS >= 1]]\n");
        return 2;
    }
    struct object *objects = calloc((size_t)count, sizeof *objects);
    if (!objects) return 1;
    for (long i = 0; i < count; i++)
        if (make(&objects[i])) return 1;
    long errors = 0, pages = 0, before = minor_faults();
    for (long round = 0; round < rounds; round++) {
        /* Half of them, chosen at random, die at once... */
        for (long i = 0; i < count; i++)
            if (next() % 2) errors += release(&objects[i]);
        /* ...and are replaced by objects of other sizes. */
        for (long i = 0; i < count; i++) {
            if (objects[i].data) continue;
            if (make(&objects[i])) return 1;
            pages += (long)((objects[i].size + 4095) / 4096);
        }
    }
    long faults = minor_faults() - before;
    for (long i = 0; i < count; i++) errors += release(&objects[i]);
    free(objects);
    if (errors) {
        printf("churn failed: %ld objects had wrong contents\n", errors);
        return 1;
    }
    printf("churn ok faults %ld pages %ld\n", faults, pages);
    return 0;
}
