/* discard-cost: what giving page ranges back to the kernel costs a multi-threaded process, one
 * madvise(MADV_DONTNEED) per range against one process_madvise(PIDFD_SELF, ranges,
 * MADV_DONTNEED) per batch of them (crates/preload/src/discard.rs). A second thread keeps
 * reading the memory on another CPU, as a program's other threads would, so that every call's
 * TLB flush must interrupt it.
 *
 *   gcc -O2 -pthread -o discard-cost bench/alloc/discard-cost.c && ./discard-cost [RANGES [BATCH]]
 *
 * RANGES (default 4096) ranges of four written pages, a page apart; BATCH (default 64, at most
 * 1024) ranges per process_madvise. Twenty rounds of each. Prints the time per range both ways,
 * or says that the kernel refuses the batch (it needs the PIDFD_SELF sentinel and
 * MADV_DONTNEED through process_madvise). Checks that every range reads zero afterwards. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096
#define PAGES_PER_RANGE 4
#define ROUNDS 20
#define PIDFD_SELF_PROCESS (-10001)

static atomic_int stop;
static volatile unsigned char *memory;
static size_t span;

static void *reader(void *arg) {
    (void)arg;
    unsigned long sum = 0;
    for (size_t i = 0; !atomic_load_explicit(&stop, memory_order_relaxed); i += PAGE)
        sum += memory[i % span];
    return (void *)sum;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int zeroed(const struct iovec *ranges, int n) {
    for (int i = 0; i < n; i++)
        if (((unsigned char *)ranges[i].iov_base)[ranges[i].iov_len - 1] != 0) return 0;
    return 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4096, batch = argc > 2 ? atoi(argv[2]) : 64;
    if (n < 1 || batch < 1 || batch > 1024) {
        fprintf(stderr, "usage: discard-cost [RANGES >= 1 [BATCH 1..1024]]\n");
        return 2;
    }
    span = (size_t)n * (PAGES_PER_RANGE + 1) * PAGE;
    unsigned char *base = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct iovec *ranges = malloc(sizeof *ranges * (size_t)n);
    if (base == MAP_FAILED || !ranges) return 1;
    memory = base;
    for (int i = 0; i < n; i++) {
        ranges[i].iov_base = base + (size_t)i * (PAGES_PER_RANGE + 1) * PAGE;
        ranges[i].iov_len = PAGES_PER_RANGE * PAGE;
    }
    pthread_t other;
    pthread_create(&other, NULL, reader, NULL);
    double one = 0, batched = 0;
    int refused = 0;
    for (int round = 0; round < ROUNDS; round++) {
        memset(base, 1, span);
        double t = now();
        for (int i = 0; i < n; i++) madvise(ranges[i].iov_base, ranges[i].iov_len, MADV_DONTNEED);
        one += now() - t;
        if (!zeroed(ranges, n)) return printf("discard-cost: madvise left data\n"), 1;
        if (refused) continue;
        memset(base, 1, span);
        t = now();
        for (int i = 0; i < n && !refused; i += batch) {
            int k = n - i < batch ? n - i : batch;
            long done = syscall(SYS_process_madvise, PIDFD_SELF_PROCESS, ranges + i, k, MADV_DONTNEED, 0);
            if (done < 0) {
                printf("process_madvise refused (errno %d): this kernel takes one range a call\n", errno);
                refused = 1;
            }
        }
        batched += now() - t;
        if (!refused && !zeroed(ranges, n)) return printf("discard-cost: process_madvise left data\n"), 1;
    }
    atomic_store(&stop, 1);
    pthread_join(other, NULL);
    printf("%d ranges of %d pages, another thread running: madvise %.2f us a range", n, PAGES_PER_RANGE,
           one / ROUNDS / n * 1e6);
    if (!refused) printf(", process_madvise in batches of %d %.2f us a range", batch, batched / ROUNDS / n * 1e6);
    printf("\n");
    return 0;
}
