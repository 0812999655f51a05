/*
 * A tracked object that realloc moves keeps its tier, judged by where the kernel put the pages
 * (move_pages status).
 *
 *   realloc_tier SLOW_NODE
 *
 * Allocates and touches an 8 MiB object (first touch: the fast node, beside the CPUs), and a
 * small tracked one after it, so that growing the first must move it; moves the first's pages
 * to SLOW_NODE itself (as the daemon would demote it); waits (up to 20 s) until the library is
 * attached and knows the tiers; then grows it to 16 MiB with realloc and writes all of it.
 * Prints one JSON line: {"before": tier, "after": tier, "pages": {node: pages}} for the grown
 * object's pages. Reports right after the writes, before any interval of the daemon could see
 * the new pages (the harness runs it with `--dry-run` anyway).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "objtier.h"

#define OLD_BYTES (8 << 20)
#define NEW_BYTES (16 << 20)
#define PAGE 4096
#define MAX_NODES 64

static void query_or_move(char *object, long bytes, const int *to, int *status) {
    long pages = bytes / PAGE;
    void **addrs = malloc(sizeof(void *) * pages);
    int *nodes = to ? malloc(sizeof(int) * pages) : NULL;
    for (long p = 0; p < pages; p++) {
        addrs[p] = object + p * PAGE;
        if (nodes)
            nodes[p] = *to;
    }
    if (syscall(SYS_move_pages, 0, pages, addrs, nodes, status, 0) < 0) {
        perror("move_pages");
        exit(1);
    }
    free(addrs);
    free(nodes);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: realloc_tier SLOW_NODE\n");
        return 64;
    }
    if (!objtier_available()) {
        fprintf(stderr, "realloc_tier: not running under libobjtier\n");
        return 1;
    }
    int slow = atoi(argv[1]);
    char *object = malloc(OLD_BYTES);
    char *neighbour = malloc(PAGE);
    if (!object || !neighbour)
        return 1;
    memset(object, 1, OLD_BYTES);
    memset(neighbour, 2, PAGE);
    int *status = malloc(sizeof(int) * (NEW_BYTES / PAGE));
    // A huge page being split or migrated answers EBUSY for a moment: try again.
    long stray = 0;
    for (int tries = 0; tries < 50; tries++) {
        query_or_move(object, OLD_BYTES, &slow, status);
        stray = 0;
        for (long p = 0; p < OLD_BYTES / PAGE; p++)
            stray += status[p] != slow;
        if (!stray)
            break;
        usleep(20000);
    }
    // The judgement below is on the copy; a few pages left behind here do not change it.
    if (stray > OLD_BYTES / PAGE / 100) {
        fprintf(stderr, "realloc_tier: %ld pages did not move to node %d\n", stray, slow);
        return 1;
    }
    int before = -1;
    for (int tries = 0; tries < 200 && (before = objtier_tier_of(object)) < 0; tries++)
        usleep(100000);
    if (before < 0) {
        fprintf(stderr, "realloc_tier: objtier_tier_of: %s (no daemon attached in 20 s)\n",
                strerror(errno));
        return 1;
    }
    uintptr_t old_address = (uintptr_t)object;
    char *grown = realloc(object, NEW_BYTES);
    if (!grown || (uintptr_t)grown == old_address) {
        fprintf(stderr, "realloc_tier: realloc gave %p from %#lx: expected a move\n",
                (void *)grown, (unsigned long)old_address);
        return 1;
    }
    for (long i = 0; i < OLD_BYTES; i += PAGE)
        if (grown[i] != 1) {
            fprintf(stderr, "realloc_tier: byte %ld lost in the move\n", i);
            return 1;
        }
    memset(grown + OLD_BYTES, 3, NEW_BYTES - OLD_BYTES);
    query_or_move(grown, NEW_BYTES, NULL, status);
    long by_node[MAX_NODES] = {0};
    for (long p = 0; p < NEW_BYTES / PAGE; p++)
        if (status[p] >= 0 && status[p] < MAX_NODES)
            by_node[status[p]]++;
    printf("{\"before\": %d, \"after\": %d, \"pages\": {", before, objtier_tier_of(grown));
    int first = 1;
    for (int node = 0; node < MAX_NODES; node++)
        if (by_node[node]) {
            printf("%s\"%d\": %ld", first ? "" : ", ", node, by_node[node]);
            first = 0;
        }
    printf("}}\n");
    free(grown);
    free(neighbour);
    return 0;
}
