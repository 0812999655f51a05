/*
 * One hot object among cold ones, for the access sources' tests and measurements.
 *
 *   hot_object DIR SECONDS       8 objects of 1 MiB, each written once, then object 5 written
 *                                over and over (every 64th byte, a pass every millisecond)
 *                                for SECONDS or until DIR/stop exists. DIR/ready gets the
 *                                objects' addresses, the hot one first, once they are written.
 *   hot_object bench MIB PASSES  one MIB-MiB object written PASSES times (every 64th byte),
 *                                then prints the seconds the passes took (wall, then CPU) and
 *                                the page faults they took (soft-dirty tracking costs one per
 *                                written page per interval): a write-heavy loop to measure what
 *                                an access source costs the program.
 *
 * Prints "hot ok" (or the bench time) and exits 0. Writes go through volatile pointers, so the
 * compiler keeps every one.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024 * 1024)
#define OBJECTS 8
#define HOT 5

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void write_pass(volatile unsigned char *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 64)
        p[i]++;
}

static int bench(long mib, long passes) {
    size_t bytes = (size_t)mib * MIB;
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
    double cpu = (after.ru_utime.tv_sec - before.ru_utime.tv_sec) +
                 (after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
                 (after.ru_utime.tv_usec - before.ru_utime.tv_usec) * 1e-6 +
                 (after.ru_stime.tv_usec - before.ru_stime.tv_usec) * 1e-6;
    printf("%.3f %.3f %ld\n", seconds, cpu, after.ru_minflt - before.ru_minflt);
    free((void *)p);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "bench") == 0)
        return bench(atol(argv[2]), atol(argv[3]));
    if (argc != 3) {
        fprintf(stderr, "usage: hot_object DIR SECONDS | hot_object bench MIB PASSES\n");
        return 2;
    }
    const char *dir = argv[1];
    double seconds = atof(argv[2]);
    volatile unsigned char *objects[OBJECTS];
    for (int i = 0; i < OBJECTS; i++) {
        objects[i] = malloc(MIB);
        if (!objects[i])
            return 1;
        write_pass(objects[i], MIB);
    }
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/ready", dir);
    snprintf(tmp, sizeof tmp, "%s/ready.tmp", dir);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return 1;
    fprintf(f, "%#lx", (unsigned long)(uintptr_t)objects[HOT]);
    for (int i = 0; i < OBJECTS; i++)
        if (i != HOT)
            fprintf(f, " %#lx", (unsigned long)(uintptr_t)objects[i]);
    fprintf(f, "\n");
    fclose(f);
    rename(tmp, path);
    snprintf(path, sizeof path, "%s/stop", dir);
    double end = now() + seconds;
    struct timespec pause = {0, 1000000};
    while (now() < end && access(path, F_OK) != 0) {
        write_pass(objects[HOT], MIB);
        nanosleep(&pause, NULL);
    }
    for (int i = 0; i < OBJECTS; i++)
        free((void *)objects[i]);
    printf("hot ok\n");
    return 0;
}
