/*
 * A process that is quiet, then allocates in a burst, then is quiet again: the daemon must sleep
 * while it is quiet and still drain its ring in time during the burst (the library rings the
 * daemon's doorbell once every eighth of the ring).
 *
 *   quiet_burst DIR [PAIRS]
 *
 * Makes one tracked allocation (the library attaches on tracked allocations), sleeps 2 s, then
 * makes PAIRS (default 20000) tracked malloc/free pairs of 8 KiB in batches of 50, pausing 5 ms
 * after each batch, and writes DIR/done. It then holds, allocating nothing, until DIR/stop
 * exists (at most 60 s). Prints "burst ok" on success.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int exists(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: quiet_burst DIR [PAIRS]\n");
        return 2;
    }
    const char *dir = argv[1];
    long pairs = argc > 2 ? atol(argv[2]) : 20000;
    char *volatile first = malloc(8192);
    if (!first) return 1;
    memset(first, 1, 8192);
    sleep(2);
    for (long i = 0; i < pairs; i++) {
        unsigned char *volatile p = malloc(8192);
        if (!p) return 1;
        p[0] = (unsigned char)i;
        p[8191] = (unsigned char)(i >> 8);
        if (p[0] != (unsigned char)i) return 1;
        free(p);
        if (i % 50 == 49) usleep(5000);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/done", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fclose(f);
    for (int tenths = 0; tenths < 600 && !exists(dir, "stop"); tenths++) usleep(100000);
    free(first);
    puts("burst ok");
    return 0;
}
