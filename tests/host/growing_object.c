// A hot object that realloc grows, for the test that the daemon carries an object's history
// over a move: two 1 MiB objects side by side; the first is written all over again and again
// until the file named by argv[1] exists. Then it is grown to 2 MiB (its neighbour holds the
// pages after it, so it moves) and to 3 MiB (in place, into the room after it), checked, and
// left alone until argv[2] seconds have passed, so that the daemon sees it idle.
// Prints "hot 0x<address>" once the objects exist, then "moved 0x<address>" after the growths.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1 << 20)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: growing_object GO_FILE SECONDS\n");
        return 64;
    }
    double end = now() + atof(argv[2]);
    char *volatile hot = malloc(MIB);
    char *volatile neighbour = malloc(MIB);
    if (!hot || !neighbour)
        return 1;
    memset(neighbour, 7, MIB);
    printf("hot %p\n", (void *)hot);
    fflush(stdout);
    unsigned long rounds = 0;
    while (access(argv[1], F_OK) != 0 && now() < end) {
        for (size_t off = 0; off < MIB; off += 4096)
            hot[off] = (char)rounds;
        rounds++;
    }
    memset(hot, 5, MIB);
    char *grown = realloc(hot, 2 * MIB);
    if (!grown || grown == hot) {
        fprintf(stderr, "realloc to 2 MiB gave %p from %p: expected a move\n", (void *)grown,
                (void *)hot);
        return 1;
    }
    char *again = realloc(grown, 3 * MIB);
    if (again != grown) {
        fprintf(stderr, "realloc to 3 MiB gave %p from %p: expected growth in place\n",
                (void *)again, (void *)grown);
        return 1;
    }
    for (size_t i = 0; i < MIB; i++)
        if (again[i] != 5) {
            fprintf(stderr, "byte %zu lost in the moves\n", i);
            return 2;
        }
    printf("moved %p\n", (void *)again);
    fflush(stdout);
    while (now() < end)
        usleep(10000);
    free(again);
    free(neighbour);
    return 0;
}
