/* oracle-validate: proves the oracle's counts are exact (tests/vm/oracle.sh runs it in the
 * tiered VM under the plugin).
 *
 *   oracle-validate [MIB [NODE]]
 *
 * Binds a buffer of MIB MiB (default 16) to each of node 0 and node NODE (default 1), faults it in outside the
 * measured window, checks with move_pages(2) where every page is, and then, inside one window,
 * loads one 8-byte word per cache line of the node-NODE buffer LOAD_PASSES times and stores one per
 * line once, and does the same on node 0. The loads and stores are single instructions written
 * in assembly (nothing the compiler could merge, vectorise or drop). Prints what it did as one
 * JSON line:
 *   {"node": NODE, "far_loads": L, "far_stores": S, "node0_loads": L0, "node0_stores": S0}
 * Nothing else of this process lives on node NODE (its stack, code and heap are node 0's, the
 * CPU node), so the oracle must count exactly L loads and S stores there (plus whatever the
 * kernel itself touches on that node), and at least L0 / S0 on node 0. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MPOL_BIND 2
#define LOAD_PASSES 4
#define LINE 64

#define ORACLE_START() __asm__ volatile(".byte 0x0f, 0x1f, 0x84, 0x00, 0x01, 0x00, 0x72, 0x6f" ::: "memory")
#define ORACLE_STOP() __asm__ volatile(".byte 0x0f, 0x1f, 0x84, 0x00, 0x02, 0x00, 0x72, 0x6f" ::: "memory")

static char *bound_buffer(size_t bytes, int node) {
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("oracle-validate: mmap");
        exit(1);
    }
    unsigned long mask = 1UL << node;
    if (syscall(SYS_mbind, p, bytes, MPOL_BIND, &mask, sizeof(mask) * 8, 0) != 0) {
        perror("oracle-validate: mbind");
        exit(1);
    }
    memset(p, 1, bytes);
    size_t pages = bytes / 4096;
    void **addrs = calloc(pages, sizeof(void *));
    int *status = calloc(pages, sizeof(int));
    for (size_t i = 0; i < pages; i++) addrs[i] = p + i * 4096;
    if (syscall(SYS_move_pages, 0, pages, addrs, NULL, status, 0) != 0) {
        perror("oracle-validate: move_pages");
        exit(1);
    }
    for (size_t i = 0; i < pages; i++) {
        if (status[i] != node) {
            fprintf(stderr, "oracle-validate: page %zu of the node-%d buffer is on node %d\n", i, node, status[i]);
            exit(1);
        }
    }
    free(addrs);
    free(status);
    return p;
}

static uint64_t load_lines(const char *p, size_t bytes) {
    uint64_t n = 0, sink = 0, v;
    for (size_t off = 0; off < bytes; off += LINE, n++) {
        __asm__ volatile("movq (%1), %0" : "=r"(v) : "r"(p + off) : "memory");
        sink += v;
    }
    __asm__ volatile("" ::"r"(sink));
    return n;
}

static uint64_t store_lines(char *p, size_t bytes) {
    uint64_t n = 0;
    for (size_t off = 0; off < bytes; off += LINE, n++)
        __asm__ volatile("movq %1, (%0)" ::"r"(p + off), "r"(n) : "memory");
    return n;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 16;
    int node = argc > 2 ? atoi(argv[2]) : 1;
    if (mib == 0 || node < 1 || node > 63) {
        fprintf(stderr, "usage: oracle-validate [MIB [NODE]] (NODE: a node other than 0)\n");
        return 2;
    }
    size_t bytes = mib << 20;
    char *slow = bound_buffer(bytes, node);
    char *fast = bound_buffer(bytes, 0);
    uint64_t l1 = 0, s1 = 0, l0 = 0, s0 = 0;
    ORACLE_START();
    for (int i = 0; i < LOAD_PASSES; i++) l1 += load_lines(slow, bytes);
    s1 += store_lines(slow, bytes);
    for (int i = 0; i < LOAD_PASSES; i++) l0 += load_lines(fast, bytes);
    s0 += store_lines(fast, bytes);
    ORACLE_STOP();
    printf("{\"node\": %d, \"far_loads\": %lu, \"far_stores\": %lu, \"node0_loads\": %lu, \"node0_stores\": %lu}\n",
           node, (unsigned long)l1, (unsigned long)s1, (unsigned long)l0, (unsigned long)s0);
    return 0;
}
