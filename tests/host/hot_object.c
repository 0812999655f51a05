// One hot object among cold ones, for the access-source tests: eight 1 MiB objects, all
// touched once; then, for `seconds`, one of them (the fifth) is written all over again and
// again. With `refault` it is also dropped (MADV_DONTNEED) before each round, so every round
// faults each of its pages in anew: the software page-fault event sees it, on any machine.
// Prints "objects 0x<address>..." and "hot 0x<address>" once the objects exist, then "done".
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define OBJECTS 8
#define SIZE (1 << 20)
#define HOT 5

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    int refault = argc > 2 && strcmp(argv[2], "refault") == 0;
    // Small objects first (4 MiB of 64-byte blocks), so the allocator's small-object memory
    // exists and is announced as blocks.
    static char *volatile small[1 << 16];
    for (int i = 0; i < 1 << 16; i++) {
        small[i] = malloc(64);
        if (!small[i])
            return 1;
        memset(small[i], i, 64);
    }
    char *volatile objects[OBJECTS];
    for (int i = 0; i < OBJECTS; i++) {
        objects[i] = malloc(SIZE);
        if (!objects[i] || (uintptr_t)objects[i] % 4096 != 0) {
            fprintf(stderr, "object %d: %p is not a page-aligned tracked object\n", i, objects[i]);
            return 1;
        }
        memset(objects[i], i + 1, SIZE);
    }
    printf("objects");
    for (int i = 0; i < OBJECTS; i++)
        printf(" %p", (void *)objects[i]);
    printf("\nhot %p\n", (void *)objects[HOT]);
    fflush(stdout);
    double end = now() + seconds;
    unsigned long rounds = 0;
    while (now() < end) {
        char *hot = objects[HOT];
        if (refault)
            madvise(hot, SIZE, MADV_DONTNEED);
        for (size_t off = 0; off < SIZE; off += 4096)
            hot[off] = (char)rounds;
        rounds++;
    }
    // The cold objects still hold what was written first.
    for (int i = 0; i < OBJECTS; i++)
        if (i != HOT && objects[i][SIZE - 1] != i + 1)
            return 2;
    printf("done %lu rounds\n", rounds);
    for (int i = 0; i < OBJECTS; i++)
        free(objects[i]);
    return 0;
}
