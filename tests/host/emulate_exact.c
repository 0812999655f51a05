/* emulate_exact: known loads and stores to known heap objects, for the exactness test of
 * `objtier profile --source emulate --emulate-cache 1M,16` (tests/host/emulate.sh).
 *
 * Every access is a single instruction written in assembly (nothing the compiler could merge,
 * vectorise or drop), one 8-byte word per 64-byte line. Each object comes from a function of
 * its own (its allocation site, named by that function's symbol). With a 1 MiB, 16-way modeled
 * cache (16,384 lines):
 *   fits      64 KiB: one store per line, then 20 loads per line: every store misses once, no
 *             load misses (1,024 lines fit; nothing else runs in between).
 *   streams    8 MiB: 3 load passes, then 1 store pass: 8x the cache, so every access misses.
 *   first     16 KiB: one store per line, then freed;
 *   flusher    8 MiB: one load pass (every line misses), which evicts everything;
 *   second    16 KiB: allocated after `first` was freed (on its pages, where the allocator
 *             reuses them): one load per line, each a miss: its own, not `first`'s.
 *   thread     4 MiB in each of 2 threads at once: one store per line (first touches miss
 *             whatever the other thread does to the shared cache).
 *   child     64 KiB in a forked child: one store per line.
 * Then it runs /bin/true through system(): a program exec'd, which runs natively.
 * It prints the expected misses per site as JSON. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define LINE 64
#define KIB 1024UL
#define MIB (1024UL * 1024UL)

static inline void load(const char *p) {
    uint64_t v;
    __asm__ volatile("movq (%1), %0" : "=r"(v) : "r"(p) : "memory");
}

static inline void store(char *p) {
    __asm__ volatile("movq %%rax, (%0)" ::"r"(p) : "memory", "rax");
}

static void loads(const char *p, size_t bytes, int passes) {
    for (int r = 0; r < passes; r++)
        for (size_t i = 0; i < bytes; i += LINE) load(p + i);
}

static void stores(char *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += LINE) store(p + i);
}

#define SITE(name) \
    __attribute__((noinline)) static char *alloc_##name(size_t bytes) { \
        char *p = malloc(bytes); \
        if (!p) { perror("malloc"); exit(1); } \
        __asm__ volatile("" ::: "memory"); \
        return p; \
    }
SITE(fits)
SITE(streams)
SITE(first)
SITE(flusher)
SITE(second)
SITE(thread)
SITE(child)

static void *thread_main(void *arg) {
    (void)arg;
    char *p = alloc_thread(4 * MIB);
    stores(p, 4 * MIB);
    return p;
}

int main(void) {
    char *fits = alloc_fits(64 * KIB);
    stores(fits, 64 * KIB);
    loads(fits, 64 * KIB, 20);

    char *streams = alloc_streams(8 * MIB);
    loads(streams, 8 * MIB, 3);
    stores(streams, 8 * MIB);

    char *first = alloc_first(16 * KIB);
    stores(first, 16 * KIB);
    free(first);
    char *flusher = alloc_flusher(8 * MIB);
    loads(flusher, 8 * MIB, 1);
    char *second = alloc_second(16 * KIB);
    loads(second, 16 * KIB, 1);

    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thread_main, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);

    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char *c = alloc_child(64 * KIB);
        stores(c, 64 * KIB);
        free(c);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    if (system("/bin/true") != 0) return 1;

    printf("{\"fits\": [0, %lu], \"streams\": [%lu, %lu], \"first\": [0, %lu], "
           "\"flusher\": [%lu, 0], \"second\": [%lu, 0], \"thread\": [0, %lu], "
           "\"child\": [0, %lu], \"same_pages\": %d}\n",
           64 * KIB / LINE, 3 * 8 * MIB / LINE, 8 * MIB / LINE, 16 * KIB / LINE, 8 * MIB / LINE,
           16 * KIB / LINE, 2 * 4 * MIB / LINE, 64 * KIB / LINE, first == second);
    return 0;
}
