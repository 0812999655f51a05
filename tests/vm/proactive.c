/*
 * A program with one hot site and one cold site that keeps allocating, for proactive placement.
 *
 *   proactive SECONDS
 *
 * Site H allocates 2 objects of 80 MiB (most of the 180 MiB budget the daemon's --fast-capacity 200M leaves) that a second thread keeps reading and writing. Site C
 * allocates a 4 MiB object every 500 ms, writes it once and never touches it again (objects
 * are kept). Right after writing each C object, move_pages says where its pages landed; one
 * JSON line per C object: {"t": seconds, "cold": i, "fast_share": share on node 0}, then at the
 * end {"hot_fast_share": share of H's pages on node 0}. Node 0 is the fast node (the tiered VM's
 * CPU node).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HOT_BYTES (80L << 20)
#define COLD_BYTES (4L << 20)
#define PAGE 4096

static atomic_int done;
static char *hot[2];

__attribute__((noinline)) static char *site_h(void) { return malloc(HOT_BYTES); }
__attribute__((noinline)) static char *site_c(void) { return malloc(COLD_BYTES); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double fast_share(char *p, long bytes) {
    long pages = bytes / PAGE, fast = 0, present = 0;
    void **addrs = malloc(sizeof(void *) * pages);
    int *status = malloc(sizeof(int) * pages);
    for (long i = 0; i < pages; i++)
        addrs[i] = p + i * PAGE;
    if (syscall(SYS_move_pages, 0, pages, addrs, NULL, status, 0) == 0)
        for (long i = 0; i < pages; i++) {
            present += status[i] >= 0;
            fast += status[i] == 0;
        }
    free(addrs);
    free(status);
    return present ? (double)fast / present : 0.0;
}

static void *hot_loop(void *arg) {
    (void)arg;
    unsigned long sum = 0;
    while (!atomic_load(&done))
        for (int o = 0; o < 2; o++)
            for (long i = 0; i < HOT_BYTES; i += PAGE)
                sum += ++hot[o][i];
    return (void *)sum;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 30;
    for (volatile int o = 0; o < 2; o++) {
        hot[o] = site_h();
        memset(hot[o], 1, HOT_BYTES);
    }
    pthread_t thread;
    pthread_create(&thread, NULL, hot_loop, NULL);
    double start = now();
    for (volatile int i = 0; now() - start < seconds; i++) {
        char *cold = site_c();
        memset(cold, i, COLD_BYTES);
        printf("{\"t\": %.2f, \"cold\": %d, \"fast_share\": %.3f}\n", now() - start, i,
               fast_share(cold, COLD_BYTES));
        fflush(stdout);
        struct timespec ts = {0, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&done, 1);
    pthread_join(thread, NULL);
    printf("{\"hot_fast_share\": %.3f}\n",
           (fast_share(hot[0], HOT_BYTES) + fast_share(hot[1], HOT_BYTES)) / 2);
    return 0;
}
