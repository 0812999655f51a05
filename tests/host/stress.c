/* Stress and edge cases of the malloc family, checked against glibc's documented behaviour.
 *
 * tests/host/run builds this and runs it twice: without LD_PRELOAD (proving every check below is
 * what glibc itself does) and under libobjtier.so (proving the replacement behaves the same).
 * It prints "stress ok" and exits 0 only if every check passed; each failed check prints its
 * file:line and condition to stderr and makes the exit status 1.
 *
 *   stress [--seconds N] [--threads N] [--threads-only]
 *
 * The single-threaded edge cases run first; then N threads (8) allocate random sizes from 8 B to
 * 1 MiB, fill them with a pattern, hand blocks to each other through a shared pool and verify and
 * free blocks other threads allocated. While they run, the main thread forks children that
 * allocate, verify and free on their own (fork-safety: a lock held by another thread at fork time
 * must not deadlock the child). With --seconds the threaded phase lasts that long instead of a
 * fixed number of operations (tests/host uses it to kill the daemon underneath a running program).
 * --threads-only skips the single-threaded edge cases, so that such a test fails only for what it
 * is about.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A block stays valid after a *failed* realloc; gcc 12 cannot tell failure from success. */
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wuse-after-free"

static atomic_int failures;

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond) && atomic_fetch_add(&failures, 1) < 20)                                    \
            fprintf(stderr, "stress: check failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
    } while (0)

#define PAGE 4096UL

/* Opaque to the optimiser, so that overflowing sizes reach the allocator at run time. */
static volatile size_t huge_count = SIZE_MAX / 2;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Hides where a pointer came from. gcc knows the malloc family's contracts (posix_memalign's
 * alignment, calloc's zeroes) and would otherwise fold the very checks this program exists for
 * to constant true. */
static inline const void *launder(const void *p) {
    __asm__ volatile("" : "+r"(p));
    return p;
}

/* Fills `len` bytes with a pattern derived from `tag` and the offset alone (so any prefix of a
 * filled block verifies); `verify` checks it. Every byte is written and checked, so a block that
 * overlaps another live block, or that moved without its contents, is caught. */
static uint64_t pattern_word(uint64_t tag, size_t offset) { return tag ^ (offset * 0x100000001B3ULL); }

static void fill(unsigned char *p, size_t len, uint64_t tag) {
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = pattern_word(tag, i);
        memcpy(p + i, &w, len - i < 8 ? len - i : 8);
    }
}

static int verify(const unsigned char *p, size_t len, uint64_t tag) {
    p = launder(p);
    for (size_t i = 0; i < len; i += 8) {
        uint64_t w = pattern_word(tag, i);
        if (memcmp(p + i, &w, len - i < 8 ? len - i : 8) != 0) return 0;
    }
    return 1;
}

static int all_zero(const unsigned char *p, size_t len) {
    p = launder(p);
    for (size_t i = 0; i < len; i++)
        if (p[i]) return 0;
    return 1;
}

static int aligned_to(const void *p, size_t align) {
    return ((uintptr_t)launder(p) & (align - 1)) == 0;
}

static void test_malloc_zero(void) {
    void *a = malloc(0), *b = malloc(0);
    CHECK(a != NULL);
    CHECK(b != NULL);
    CHECK(a != b);
    free(a);
    free(b);
    free(NULL);
}

static void test_calloc(void) {
    errno = 0;
    void *p = calloc(huge_count, 3);
    CHECK(p == NULL);
    CHECK(errno == ENOMEM);
    free(p);

    static const size_t sizes[] = {1, 24, 100, 4000, 4095, 4096, 4097, 8192, 65536, 300000, 3 << 20};
    for (size_t round = 0; round < 3; round++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t n = sizes[s];
            /* Dirty a block of this size and free it, so the calloc below is likely to get the
             * same memory back: it must still come back zeroed. */
            unsigned char *dirty = malloc(n);
            CHECK(dirty != NULL);
            if (dirty) memset(dirty, 0xA5, n);
            free(dirty);
            unsigned char *z = calloc(1, n);
            CHECK(z != NULL);
            if (z) {
                CHECK(all_zero(z, n));
                memset(z, 0x5A, n);
            }
            free(z);
            unsigned char *z2 = calloc(n, 1);
            CHECK(z2 != NULL);
            if (z2) CHECK(all_zero(z2, n));
            free(z2);
        }
    }
}

static void test_realloc(void) {
    unsigned char *p = realloc(NULL, 100);
    CHECK(p != NULL);
    if (!p) return;
    fill(p, 100, 1);
    /* Grow across the 4 KiB tracking threshold, then far beyond, then back down. */
    static const size_t steps[] = {4095, 4096, 8000, 200000, 5 << 20, 300000, 4097, 4096, 3000, 50, 10, 6000};
    size_t valid = 100;
    uint64_t tag = 1;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t n = steps[i];
        unsigned char *q = realloc(p, n);
        CHECK(q != NULL);
        if (!q) {
            free(p);
            return;
        }
        size_t keep = valid < n ? valid : n;
        CHECK(verify(q, keep, tag));
        CHECK(malloc_usable_size(q) >= n);
        tag++;
        fill(q, n, tag);
        valid = n;
        p = q;
    }
    /* realloc(p, 0) frees p and returns NULL (glibc's REALLOC_ZERO_BYTES_FREES). */
    void *r = realloc(p, 0);
    CHECK(r == NULL);

    /* The same on a block that starts large. */
    p = malloc(1 << 20);
    CHECK(p != NULL);
    if (p) {
        fill(p, 1 << 20, 77);
        unsigned char *q = realloc(p, 1000);
        CHECK(q != NULL);
        if (q) {
            CHECK(verify(q, 1000, 77));
            CHECK(realloc(q, 0) == NULL);
        }
    }

    /* realloc that cannot be satisfied leaves the block untouched. */
    p = malloc(64);
    if (p) {
        fill(p, 64, 5);
        errno = 0;
        void *q = realloc(p, huge_count);
        CHECK(q == NULL);
        CHECK(errno == ENOMEM);
        CHECK(verify(p, 64, 5));
        free(p);
    }

    errno = 0;
    CHECK(reallocarray(NULL, huge_count, 3) == NULL);
    CHECK(errno == ENOMEM);
    p = reallocarray(NULL, 10, 100);
    CHECK(p != NULL);
    if (p) {
        fill(p, 1000, 9);
        unsigned char *q = reallocarray(p, 100, 100);
        CHECK(q != NULL);
        if (q) {
            CHECK(verify(q, 1000, 9));
            errno = 0;
            CHECK(reallocarray(q, huge_count, 3) == NULL);
            CHECK(errno == ENOMEM);
            CHECK(verify(q, 1000, 9)); /* a failed reallocarray keeps the block */
            free(q);
        }
    }
}

static void test_aligned(void) {
    void *sentinel = (void *)0x1234;
    static const size_t bad[] = {0, 3, 4, 24, 100, 4097};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *out = sentinel;
        CHECK(posix_memalign(&out, bad[i], 64) == EINVAL);
        CHECK(out == sentinel); /* untouched on failure */
    }
    static const size_t aligns[] = {8, 16, 64, 4096, 65536};
    static const size_t sizes[] = {1, 100, 4096, 5000, 300000};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            void *out = NULL;
            CHECK(posix_memalign(&out, aligns[a], sizes[s]) == 0);
            CHECK(out != NULL && aligned_to(out, aligns[a]));
            if (out) {
                CHECK(malloc_usable_size(out) >= sizes[s]);
                memset(out, 0xCC, sizes[s]);
            }
            free(out);

            void *p = aligned_alloc(aligns[a], sizes[s]);
            CHECK(p != NULL && aligned_to(p, aligns[a]));
            if (p) memset(p, 0xCD, sizes[s]);
            free(p);

            p = memalign(aligns[a], sizes[s]);
            CHECK(p != NULL && aligned_to(p, aligns[a]));
            if (p) memset(p, 0xCE, sizes[s]);
            free(p);
        }
    }
    /* Alignment above the allocator's smallest size class: tiny blocks must still honour it.
     * Blocks are kept live so that every request gets a fresh block. */
    void *tiny[3 * 16 * 4] = {0};
    size_t t = 0;
    for (int round = 0; round < 4; round++) {
        for (size_t n = 1; n <= 16; n++) {
            void *out = NULL;
            CHECK(posix_memalign(&out, 16, n) == 0 && aligned_to(out, 16));
            tiny[t++] = out;
            tiny[t] = aligned_alloc(16, n);
            CHECK(aligned_to(tiny[t++], 16));
            tiny[t] = memalign(16, n);
            CHECK(aligned_to(tiny[t++], 16));
        }
    }
    for (size_t i = 0; i < t; i++) free(tiny[i]);

    /* memalign rounds a non-power-of-two alignment up rather than failing. */
    void *m = memalign(48, 100);
    CHECK(m != NULL && aligned_to(m, 64));
    free(m);

    static const size_t page_sizes[] = {1, 100, 4096, 4097, 10000, 1 << 20};
    for (size_t s = 0; s < sizeof page_sizes / sizeof page_sizes[0]; s++) {
        size_t n = page_sizes[s];
        void *v = valloc(n);
        CHECK(v != NULL && aligned_to(v, PAGE));
        if (v) {
            CHECK(malloc_usable_size(v) >= n);
            memset(v, 0x11, n);
        }
        free(v);
        void *pv = pvalloc(n);
        size_t rounded = (n + PAGE - 1) / PAGE * PAGE;
        CHECK(pv != NULL && aligned_to(pv, PAGE));
        if (pv) {
            CHECK(malloc_usable_size(pv) >= rounded);
            memset(pv, 0x22, rounded); /* pvalloc's whole rounded size is usable */
        }
        free(pv);
    }
}

static void test_usable_size(void) {
    static const size_t sizes[] = {1, 8, 24, 100, 1000, 4095, 4096, 4097, 65536, 1 << 20, 10 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        unsigned char *p = malloc(sizes[s]);
        CHECK(p != NULL);
        if (!p) continue;
        size_t usable = malloc_usable_size(p);
        CHECK(usable >= sizes[s]);
        memset(p, 0x33, usable); /* all of the usable size may be written */
        free(p);
    }
    CHECK(malloc_usable_size(NULL) == 0);
}

/* ---- the multithreaded phase ---------------------------------------------------------- */

struct block {
    unsigned char *p;
    size_t len;
    uint64_t tag;
};

#define POOL_SLOTS 256
static struct block pool[POOL_SLOTS];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static double deadline;            /* with --seconds */
static long ops_per_thread = 6000; /* without */
static atomic_long total_ops;

static size_t random_size(uint64_t *rng) {
    uint64_t r = splitmix(rng);
    switch (r % 20) {
    case 0: /* 5%: 64 KiB .. 1 MiB */
        return 65536 + (r >> 8) % (1048576 - 65536 + 1);
    case 1: case 2: case 3: case 4: case 5: /* 25%: around and above the 4 KiB threshold */
        return 2048 + (r >> 8) % (65536 - 2048);
    default: /* 70%: small */
        return 8 + (r >> 8) % 2040;
    }
}

static void *worker(void *arg) {
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x1234567ULL + 1;
    struct block mine[16] = {{0}};
    for (long op = 0;; op++) {
        if (deadline > 0 ? now_seconds() >= deadline : op >= ops_per_thread) break;
        uint64_t r = splitmix(&rng);
        struct block b = {0};
        b.len = random_size(&rng);
        b.tag = splitmix(&rng);
        switch (r % 4) {
        case 0: b.p = malloc(b.len); break;
        case 1: b.p = calloc(1, b.len); if (b.p) CHECK(all_zero(b.p, b.len)); break;
        case 2: { void *q = NULL; if (posix_memalign(&q, 64, b.len) == 0) b.p = q; break; }
        default: b.p = realloc(NULL, b.len); break;
        }
        CHECK(b.p != NULL);
        if (!b.p) continue;
        fill(b.p, b.len, b.tag);

        /* Keep some blocks for a while, grow or shrink them in place of a new allocation. */
        struct block *own = &mine[r % 16];
        if (own->p) {
            CHECK(verify(own->p, own->len, own->tag));
            size_t n = random_size(&rng);
            unsigned char *q = realloc(own->p, n);
            CHECK(q != NULL);
            if (q) {
                size_t keep = own->len < n ? own->len : n;
                CHECK(verify(q, keep, own->tag));
                own->tag = splitmix(&rng);
                own->p = q;
                own->len = n;
                fill(q, n, own->tag);
            } else {
                free(own->p);
                own->p = NULL;
            }
        } else {
            *own = b;
            b.p = NULL;
        }
        if (!b.p) continue;

        /* Swap the new block into the shared pool; verify and free whatever was there (most
         * likely allocated by another thread). */
        struct block old;
        pthread_mutex_lock(&pool_lock);
        size_t slot = (r >> 16) % POOL_SLOTS;
        old = pool[slot];
        pool[slot] = b;
        pthread_mutex_unlock(&pool_lock);
        if (old.p) {
            CHECK(verify(old.p, old.len, old.tag));
            free(old.p);
        }
        atomic_fetch_add(&total_ops, 1);
    }
    for (int i = 0; i < 16; i++) {
        if (mine[i].p) {
            CHECK(verify(mine[i].p, mine[i].len, mine[i].tag));
            free(mine[i].p);
        }
    }
    return NULL;
}

/* A child forked while workers run: it must be able to allocate, use blocks it inherited, and
 * free them, without deadlocking on a lock some worker held at fork time. */
static int child_after_fork(struct block inherited) {
    alarm(20); /* a deadlock shows up as SIGALRM in the parent's wait status */
    int bad = 0;
    if (inherited.p && !verify(inherited.p, inherited.len, inherited.tag)) bad = 1;
    free(inherited.p);
    uint64_t rng = (uint64_t)getpid();
    struct block live[64] = {{0}};
    for (int i = 0; i < 2000; i++) {
        struct block *b = &live[splitmix(&rng) % 64];
        if (b->p) {
            if (!verify(b->p, b->len, b->tag)) bad = 1;
            free(b->p);
        }
        b->len = random_size(&rng);
        b->tag = splitmix(&rng);
        b->p = malloc(b->len);
        if (!b->p) {
            bad = 1;
            continue;
        }
        fill(b->p, b->len, b->tag);
    }
    for (int i = 0; i < 64; i++) {
        if (live[i].p && !verify(live[i].p, live[i].len, live[i].tag)) bad = 1;
        free(live[i].p);
    }
    return bad ? 3 : 0;
}

static void fork_while_threads_run(int forks) {
    for (int i = 0; i < forks; i++) {
        usleep(150000);
        /* Give the child a block the parent allocated, so the child frees parent memory. */
        struct block inherited = {0};
        inherited.len = (i % 2) ? 100000 : 200;
        inherited.tag = 0xF0F0 + i;
        inherited.p = malloc(inherited.len);
        CHECK(inherited.p != NULL);
        if (inherited.p) fill(inherited.p, inherited.len, inherited.tag);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(child_after_fork(inherited));
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "stress: forked child %d ended with %s %d\n", (int)pid,
                    WIFEXITED(status) ? "exit status" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            atomic_fetch_add(&failures, 1);
        }
        /* The parent's copy is untouched by whatever the child did. */
        if (inherited.p) CHECK(verify(inherited.p, inherited.len, inherited.tag));
        free(inherited.p);
    }
}

int main(int argc, char **argv) {
    int threads = 8;
    double seconds = 0;
    int edge_cases = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--threads-only")) {
            edge_cases = 0;
        } else {
            fprintf(stderr, "usage: stress [--seconds N] [--threads N] [--threads-only]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 64) threads = 8;

    if (edge_cases) {
        test_malloc_zero();
        test_calloc();
        test_realloc();
        test_aligned();
        test_usable_size();
    }

    if (seconds > 0) deadline = now_seconds() + seconds;
    pthread_t tids[64];
    for (int i = 0; i < threads; i++)
        CHECK(pthread_create(&tids[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0);
    fork_while_threads_run(seconds > 0 ? (int)(seconds * 2) : 3);
    for (int i = 0; i < threads; i++) pthread_join(tids[i], NULL);
    for (int i = 0; i < POOL_SLOTS; i++) {
        if (pool[i].p) {
            CHECK(verify(pool[i].p, pool[i].len, pool[i].tag));
            free(pool[i].p);
        }
    }
    CHECK(atomic_load(&total_ops) > 0);

    int failed = atomic_load(&failures);
    if (failed) {
        fprintf(stderr, "stress: %d check(s) failed\n", failed);
        return 1;
    }
    fprintf(stderr, "stress: %ld pooled operations\n", (long)atomic_load(&total_ops));
    printf("stress ok\n");
    return 0;
}
