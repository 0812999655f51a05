/*
 * What clearing a process's accessed bits costs the process: the CPU sets a page's bit again on
 * the next touch of it, and that time is the program's. The `proc` source clears them every
 * interval (`clear_refs 2`), so a program pays this for every page it touches per interval.
 *
 *   clear_cost MIB [PASSES]
 *
 * Maps MIB MiB (4 KiB pages, no transparent huge pages), writes it once, then reads one byte a
 * page in PASSES passes (default 8) twice over: first with nothing cleared between passes, then
 * writing "2" to /proc/self/clear_refs before each. Prints the median time a page of each, the
 * difference, and what the clear itself took. Build: gcc -O2 -o clear_cost clear_cost.c
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, compare);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 0;
    int passes = argc > 2 ? atoi(argv[2]) : 8;
    if (mib < 1 || passes < 1 || passes > 1000) {
        fprintf(stderr, "usage: clear_cost MIB [PASSES 1..1000]\n");
        return 2;
    }
    size_t bytes = (size_t)mib << 20, pages = bytes / 4096;
    unsigned char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    madvise(p, bytes, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0) {
        perror("/proc/self/clear_refs (needs CONFIG_PROC_PAGE_MONITOR)");
        return 1;
    }
    double *warm = calloc(passes, sizeof *warm), *cleared = calloc(passes, sizeof *cleared),
           *clear = calloc(passes, sizeof *clear);
    volatile unsigned long sum = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < passes; i++) {
            double t0 = now();
            if (round == 1 && write(fd, "2", 1) != 1) {
                perror("write clear_refs");
                return 1;
            }
            double t1 = now();
            for (size_t j = 0; j < bytes; j += 4096) sum += p[j];
            double t2 = now();
            (round ? cleared : warm)[i] = (t2 - t1) * 1e9 / pages;
            if (round) clear[i] = (t1 - t0) * 1e3;
        }
    }
    double w = median(warm, passes), c = median(cleared, passes);
    printf("%ld MiB, %zu pages, %d passes: %.0f ns a page with the bits set, %.0f ns after "
           "clear_refs (%.0f ns more, %.1f ms a pass); the clear itself %.1f ms\n",
           mib, pages, passes, w, c, c - w, (c - w) * pages / 1e6, median(clear, passes));
    return 0;
}
