/*
 * Freed memory left idle goes back to the kernel, and only that memory: two threads allocate
 * OBJECTS objects of three pages each and write every byte, then free every other one (so that
 * no two freed objects are neighbours: each is a range of its own to give back). The program
 * waits past the library's idle time, makes one more allocation of the kind it tracks (which
 * runs the idle purge), and checks
 *   - that its resident set fell by at least three quarters of the bytes it freed, and
 *   - that every object it kept still holds what it wrote (a range given back by mistake would
 *     read as zero).
 *
 *   idle_purge [OBJECTS]
 *
 * OBJECTS defaults to 4000 (47 MiB, half of it freed: under the library's least cache, so that
 * only the idle purge, not the cache's budget, gives it back). Prints
 *   purge ok freed F KiB resident before R0 KiB after R1 KiB
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define OBJECT_BYTES (3 * 4096)

static unsigned char **objects;
static long count;

static unsigned char fill_of(long i) { return (unsigned char)(i * 131 + 7) | 1; }

struct part {
    long from, to;
};

static void *allocate(void *arg) {
    struct part *part = arg;
    for (long i = part->from; i < part->to; i++) {
        objects[i] = malloc(OBJECT_BYTES);
        if (!objects[i]) return (void *)1;
        memset(objects[i], fill_of(i), OBJECT_BYTES);
    }
    return NULL;
}

static long resident_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2) {
        fprintf(stderr, "idle_purge: cannot read /proc/self/statm\n");
        exit(2);
    }
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv) {
    count = argc > 1 ? atol(argv[1]) : 4000;
    if (count < 2) {
        fprintf(stderr, "usage: idle_purge [OBJECTS >= 2]\n");
        return 2;
    }
    objects = calloc((size_t)count, sizeof *objects);
    if (!objects) return 1;
    pthread_t other;
    struct part halves[2] = {{0, count / 2}, {count / 2, count}};
    pthread_create(&other, NULL, allocate, &halves[1]);
    void *failed_here = allocate(&halves[0]), *failed_there = NULL;
    pthread_join(other, &failed_there);
    if (failed_here || failed_there) {
        printf("idle_purge: malloc failed\n");
        return 1;
    }
    long freed = 0;
    for (long i = 0; i < count; i += 2) {
        free(objects[i]);
        objects[i] = NULL;
        freed += OBJECT_BYTES / 1024;
    }
    long before = resident_kib();
    /* Past the idle time (a quarter of a second), into ticks of their own. */
    struct timespec wait = {0, 700 * 1000 * 1000};
    nanosleep(&wait, NULL);
    /* Through a volatile pointer: a compiler may drop a malloc whose block nobody uses. */
    unsigned char *volatile probe = malloc(64 * 1024);
    if (probe) probe[0] = 1;
    free(probe);
    long after = resident_kib();
    long wrong = 0;
    for (long i = 1; i < count; i += 2)
        for (long b = 0; b < OBJECT_BYTES; b += 512)
            wrong += objects[i][b] != fill_of(i);
    if (wrong) {
        printf("idle_purge: %ld bytes of kept objects changed\n", wrong);
        return 1;
    }
    if ((before - after) * 4 < freed * 3) {
        printf("idle_purge: freed %ld KiB, resident %ld KiB before the purge and %ld after\n",
               freed, before, after);
        return 1;
    }
    printf("purge ok freed %ld KiB resident before %ld KiB after %ld KiB\n", freed, before, after);
    return 0;
}
