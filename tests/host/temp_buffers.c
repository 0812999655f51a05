/*
 * A program whose one allocation site makes temporary buffers at a high rate, until it starts
 * keeping some of them: the daemon should find the site short-lived (its objects all die young)
 * and have the library report only a sample of them, then see a sampled buffer live on, stop
 * calling the site short-lived, and learn every buffer the library allocated unreported
 * meanwhile that still lives.
 *
 *   temp_buffers DIR [SECONDS]
 *
 * Two threads allocate 8-32 KiB buffers from one call site (`make_buffer`), fill, check and free
 * them; DIR/allocs holds the buffers allocated so far, rewritten every 100 ms. When DIR/keep
 * appears, each thread keeps one buffer in seven for a while (1,500 each), churning as before,
 * then the threads stop; the program writes the number of buffers it holds to DIR/ready and
 * waits for DIR/stop, allocating and freeing a 16 KiB buffer (from another site) every 10 ms
 * meanwhile: the library answers the daemon's requests on its tracked allocations. It then
 * checks every kept buffer and prints "temp_buffers ok kept=N".
 *
 * With SECONDS (a decimal number), the threads only churn, for that long, and the program exits
 * printing "temp_buffers ok churned=N": a short run of the program, for warm start.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define THREADS 2
#define KEEP_PER_THREAD 1500

static const char *dir;
static atomic_long allocated;
static atomic_int keeping, stopped;

struct kept {
    unsigned char *data;
    size_t size;
    uint64_t tag;
};

static struct kept kept[THREADS][KEEP_PER_THREAD];
static int kept_count[THREADS];

static int exists(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static void write_file(const char *name, long value) {
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror("fopen");
        exit(1);
    }
    fprintf(f, "%ld\n", value);
    fclose(f);
    rename(tmp, path);
}

static uint64_t next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void fill(unsigned char *p, size_t size, uint64_t tag) {
    for (size_t i = 0; i < size - 1; i += 512) p[i] = (unsigned char)(tag + i / 512);
    p[size - 1] = (unsigned char)(tag >> 8);
}

static long check(const unsigned char *p, size_t size, uint64_t tag) {
    long bad = 0;
    for (size_t i = 0; i < size - 1; i += 512) bad += p[i] != (unsigned char)(tag + i / 512);
    return bad + (p[size - 1] != (unsigned char)(tag >> 8));
}

/* The one call site of every buffer. */
__attribute__((noinline)) static unsigned char *make_buffer(size_t size) {
    unsigned char *p = malloc(size);
    if (!p) {
        fprintf(stderr, "malloc(%zu) failed\n", size);
        exit(1);
    }
    return p;
}

static void *churn(void *arg) {
    int t = (int)(intptr_t)arg;
    uint64_t x = 0x5eed + (uint64_t)t;
    long bad = 0;
    for (long n = 0; !atomic_load(&stopped); n++) {
        size_t size = 8192 + next(&x) % (24 * 1024);
        uint64_t tag = next(&x);
        unsigned char *p = make_buffer(size);
        fill(p, size, tag);
        atomic_fetch_add_explicit(&allocated, 1, memory_order_relaxed);
        if (atomic_load_explicit(&keeping, memory_order_relaxed) && n % 7 == 0 &&
            kept_count[t] < KEEP_PER_THREAD) {
            kept[t][kept_count[t]++] = (struct kept){p, size, tag};
            continue;
        }
        bad += check(p, size, tag);
        free(p);
    }
    return (void *)(intptr_t)bad;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Stops the churning threads; returns the corrupted bytes they found. */
static long stop(pthread_t *threads) {
    atomic_store(&stopped, 1);
    long bad = 0;
    for (int t = 0; t < THREADS; t++) {
        void *result;
        pthread_join(threads[t], &result);
        bad += (long)(intptr_t)result;
    }
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: temp_buffers DIR [SECONDS]\n");
        return 2;
    }
    dir = argv[1];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, churn, (void *)(intptr_t)t);
    if (argc == 3) {
        sleep_ms((long)(atof(argv[2]) * 1000));
        long bad = stop(threads);
        if (bad) {
            printf("temp_buffers: %ld corrupted bytes\n", bad);
            return 1;
        }
        printf("temp_buffers ok churned=%ld\n", atomic_load(&allocated));
        return 0;
    }
    while (!exists("keep")) {
        write_file("allocs", atomic_load(&allocated));
        sleep_ms(100);
    }
    atomic_store(&keeping, 1);
    for (;;) {
        int full = 1;
        for (int t = 0; t < THREADS; t++) full &= kept_count[t] == KEEP_PER_THREAD;
        if (full) break;
        sleep_ms(10);
    }
    sleep_ms(1000);
    long bad = stop(threads);
    write_file("ready", THREADS * KEEP_PER_THREAD);
    while (!exists("stop")) {
        unsigned char *p = malloc(16384);
        if (!p) return 1;
        p[0] = 1;
        free(p);
        sleep_ms(10);
    }
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < kept_count[t]; i++) {
            bad += check(kept[t][i].data, kept[t][i].size, kept[t][i].tag);
            free(kept[t][i].data);
        }
    if (bad) {
        printf("temp_buffers: %ld corrupted bytes\n", bad);
        return 1;
    }
    printf("temp_buffers ok kept=%d\n", THREADS * KEEP_PER_THREAD);
    return 0;
}
