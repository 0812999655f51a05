/*
 * A write-heavy loop, to measure what an access source costs the program it watches.
 *
 *   write_loop MIB PASSES
 *
 * One MIB-MiB object (a tracked object under libobjtier.so), written once, then written PASSES
 * times more (every 64th byte). Prints the seconds the passes took, wall then CPU, and the page
 * faults they took (soft-dirty tracking costs one per written page per interval). Writes go
 * through a volatile pointer, so the compiler keeps every one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu(const struct rusage *r) {
    return r->ru_utime.tv_sec + r->ru_stime.tv_sec + (r->ru_utime.tv_usec + r->ru_stime.tv_usec) * 1e-6;
}

static void write_pass(volatile unsigned char *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 64)
        p[i]++;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: write_loop MIB PASSES\n");
        return 2;
    }
    size_t bytes = (size_t)atol(argv[1]) << 20;
    long passes = atol(argv[2]);
    volatile unsigned char *p = malloc(bytes);
    if (!p)
        return 1;
    write_pass(p, bytes);
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    double start = now();
    for (long i = 0; i < passes; i++)
        write_pass(p, bytes);
    double seconds = now() - start;
    getrusage(RUSAGE_SELF, &after);
    printf("%.3f %.3f %ld\n", seconds, cpu(&after) - cpu(&before), after.ru_minflt - before.ru_minflt);
    free((void *)p);
    return 0;
}
