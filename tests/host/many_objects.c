/*
 * 200,000 live large objects must cost a handful of memory mappings, not one each (the kernel's
 * default vm.max_map_count is 65530), also when they come from two allocation sites one of
 * which the daemon placed in a tier.
 *
 *   many_objects DIR [N]
 *
 * Allocates N (default 200000) objects of 4-16 KiB from two call sites, touching each, and
 * checks the mapping count; then frees every other one and keeps making a tracked allocation
 * every 20 ms for DIR/hold-seconds (default 0) or until DIR/stop exists, so the library keeps
 * ticking (a resync happens on ticks), writing DIR/ready with "<live tracked objects>
 * <new mappings>" when it starts holding. Every
 * object's contents are checked before exiting. Prints "many ok" on success.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One tracked allocation, freed: the library checks its daemon link (and serves resyncs) on
 * tracked allocations. Through a volatile pointer: compilers delete free(malloc(n)). */
static void tick_allocation(size_t n) {
    void *volatile p = malloc(n);
    free(p);
}

static int count_maps(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

__attribute__((noinline)) static unsigned char *site_even(size_t n) { return malloc(n); }
__attribute__((noinline)) static unsigned char *site_odd(size_t n) { return malloc(n); }

static size_t size_of(long i) { return 4096 + (size_t)(i % 4) * 4096; }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: many_objects DIR [N]\n");
        return 2;
    }
    const char *dir = argv[1];
    long n = argc > 2 ? atol(argv[2]) : 200000;
    int before = count_maps();
    unsigned char **objects = calloc((size_t)n, sizeof *objects);
    if (!objects)
        return 1;
    for (long i = 0; i < n; i++) {
        size_t size = size_of(i);
        objects[i] = i % 2 ? site_odd(size) : site_even(size);
        if (!objects[i]) {
            printf("FAIL: allocation %ld of %zu bytes failed\n", i, size);
            return 1;
        }
        objects[i][0] = (unsigned char)i;
        objects[i][size - 1] = (unsigned char)(i >> 8);
    }
    int after = count_maps();
    if (after - before > 200) {
        printf("FAIL: %ld live objects took %d new mappings (%d -> %d)\n", n, after - before,
               before, after);
        return 1;
    }
    for (long i = 1; i < n; i += 2) {
        free(objects[i]);
        objects[i] = NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/hold-seconds", dir);
    long hold = 0;
    FILE *h = fopen(path, "r");
    if (h) {
        if (fscanf(h, "%ld", &hold) != 1)
            hold = 0;
        fclose(h);
    }
    snprintf(path, sizeof path, "%s/ready", dir);
    FILE *ready = fopen(path, "w");
    if (ready) {
        /* Live tracked objects: the even ones, and the pointer array itself. */
        fprintf(ready, "%ld %d\n", (n + 1) / 2 + 1, after - before);
        fclose(ready);
    }
    snprintf(path, sizeof path, "%s/stop", dir);
    for (long t = 0; t < hold * 50 && access(path, F_OK) != 0; t++) {
        tick_allocation(8192);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (long i = 0; i < n; i += 2) {
        size_t size = size_of(i);
        if (objects[i][0] != (unsigned char)i || objects[i][size - 1] != (unsigned char)(i >> 8)) {
            printf("FAIL: object %ld lost its contents\n", i);
            return 1;
        }
        free(objects[i]);
    }
    free(objects);
    printf("many ok (%d new mappings for %ld objects)\n", after - before, n);
    return 0;
}
