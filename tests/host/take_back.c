/*
 * Churn that makes the library take back most of its allocation reports (an object freed while
 * its allocation still waits unread in the ring is never heard of, and its free is not sent),
 * mixed with everything that must not be taken back: objects freed by another thread, objects
 * grown by realloc (in place or moved), and objects that live on. When the churn stops, the
 * daemon must know exactly the objects still live: none missing, none left over.
 *
 *   take_back DIR [ITERATIONS]
 *
 * Run it with OBJTIER_TRACK_MAX_WASTE=100, so that every object is tracked.
 *
 * Four threads, each with a window of 256 slots of tracked objects (8-64 KiB, every one filled
 * with a pattern of its own): ITERATIONS (default 200000) times each, a thread frees a random
 * slot's object (or hands it to the next thread, which frees it, one time in eight) and
 * allocates another there; one time in sixteen it grows the object with realloc instead, and one
 * time in sixty-four it keeps the object to the end. Then it writes DIR/ready with the number of
 * live tracked objects and holds them, making a tracked allocation every 20 ms (the library
 * serves resyncs on them), until DIR/stop exists; then checks and frees everything. Prints
 * "take_back ok" on success.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define THREADS 4
#define WINDOW 256
#define KEEP_MAX 8192

struct object {
    unsigned char *data;
    size_t size;
    uint64_t tag;
};

static long iterations = 200000;
static atomic_long errors;
/* A mailbox per thread: an object handed to it by the previous thread (a small copy of its
 * description, itself malloc'ed), freed by it. */
static _Atomic(struct object *) mailbox[THREADS];
static struct object kept[THREADS][KEEP_MAX];
static long kept_count[THREADS];
static struct object windows[THREADS][WINDOW];

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One byte per 512, so that filling costs little and a mix-up shows. */
static void fill(unsigned char *p, size_t n, uint64_t tag) {
    for (size_t i = 0; i < n; i += 512)
        p[i] = (unsigned char)(tag + i / 512);
}

static long check(const unsigned char *p, size_t n, uint64_t tag) {
    long bad = 0;
    for (size_t i = 0; i < n; i += 512)
        bad += p[i] != (unsigned char)(tag + i / 512);
    return bad;
}

static void release(struct object *o) {
    if (!o->data)
        return;
    atomic_fetch_add(&errors, check(o->data, o->size, o->tag));
    free(o->data);
    o->data = NULL;
}

static void *churn(void *arg) {
    int t = (int)(intptr_t)arg, to = (t + 1) % THREADS;
    uint64_t rng = 0x7A4EBAC4 + (uint64_t)t;
    for (long i = 0; i < iterations; i++) {
        /* What the previous thread handed over is this one's to free. */
        struct object *handed = atomic_exchange(&mailbox[t], NULL);
        if (handed) {
            release(handed);
            free(handed);
        }
        struct object *o = &windows[t][next(&rng) % WINDOW];
        uint64_t dice = next(&rng);
        if (o->data && dice % 16 == 0) {
            size_t grown = o->size + 4096 + next(&rng) % 16384;
            unsigned char *p = realloc(o->data, grown);
            if (!p) {
                atomic_fetch_add(&errors, 1);
                continue;
            }
            atomic_fetch_add(&errors, check(p, o->size, o->tag));
            o->data = p;
            o->size = grown;
            fill(o->data, o->size, o->tag);
            continue;
        }
        if (o->data && dice % 64 == 1 && kept_count[t] < KEEP_MAX) {
            kept[t][kept_count[t]++] = *o;
            o->data = NULL;
        } else if (o->data && dice % 8 == 2 && !atomic_load(&mailbox[to])) {
            struct object *copy = malloc(sizeof *copy);
            if (!copy) {
                atomic_fetch_add(&errors, 1);
                continue;
            }
            *copy = *o;
            atomic_store(&mailbox[to], copy);
            o->data = NULL;
        } else {
            release(o);
        }
        o->size = 8192 + next(&rng) % (56 * 1024);
        o->tag = next(&rng);
        o->data = malloc(o->size);
        if (!o->data) {
            atomic_fetch_add(&errors, 1);
            continue;
        }
        fill(o->data, o->size, o->tag);
    }
    return NULL;
}

static void tick_allocation(size_t n) {
    void *volatile p = malloc(n);
    free(p);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: take_back DIR [ITERATIONS]\n");
        return 2;
    }
    if (argc > 2)
        iterations = atol(argv[2]);
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++)
        pthread_create(&threads[t], NULL, churn, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    long live = 0;
    for (int t = 0; t < THREADS; t++) {
        live += kept_count[t] + (atomic_load(&mailbox[t]) != NULL);
        for (int i = 0; i < WINDOW; i++)
            live += windows[t][i].data != NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/ready.tmp", argv[1]);
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    fprintf(f, "%ld\n", live);
    fclose(f);
    char ready[4096];
    snprintf(ready, sizeof ready, "%s/ready", argv[1]);
    rename(path, ready);
    snprintf(path, sizeof path, "%s/stop", argv[1]);
    for (int waited = 0; access(path, F_OK) != 0 && waited < 3000; waited++) {
        tick_allocation(4096);
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000 * 1000}, NULL);
    }
    for (int t = 0; t < THREADS; t++) {
        struct object *handed = atomic_exchange(&mailbox[t], NULL);
        if (handed) {
            release(handed);
            free(handed);
        }
        for (int i = 0; i < WINDOW; i++)
            release(&windows[t][i]);
        for (long i = 0; i < kept_count[t]; i++)
            release(&kept[t][i]);
    }
    long bad = atomic_load(&errors);
    printf("take_back %s (%ld live at the hold, %ld bad bytes)\n", bad ? "FAILED" : "ok", live,
           bad);
    return bad != 0;
}
