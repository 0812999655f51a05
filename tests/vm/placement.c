/*
 * Site placement on real tiers, judged by where the kernel put the pages (move_pages status).
 *
 *   placement DIR
 *
 * Allocates and touches 4 objects of 16 MiB from site P (one call path), writes DIR/ready and
 * waits (up to 60 s) for DIR/placed, written by the harness after `objtier place`; then
 * allocates and touches 8 more objects from site P and 8 from site U (never placed), and
 * prints one JSON line: {"placed": {node: pages}, "unplaced": {node: pages}} for the objects
 * allocated after the placement. Reports right after touching, before any interval of the
 * daemon could have seen (let alone migrated) these new objects.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define OBJECT_BYTES (16 << 20)
#define PAGE 4096
#define MAX_NODES 64

__attribute__((noinline)) static char *site_p(void) { return malloc(OBJECT_BYTES); }
__attribute__((noinline)) static char *site_u(void) { return malloc(OBJECT_BYTES); }

static void count_nodes(char **objects, int n, long *pages_by_node) {
    long pages = OBJECT_BYTES / PAGE;
    void **addrs = malloc(sizeof(void *) * pages);
    int *status = malloc(sizeof(int) * pages);
    for (int i = 0; i < n; i++) {
        for (long p = 0; p < pages; p++)
            addrs[p] = objects[i] + p * PAGE;
        if (syscall(SYS_move_pages, 0, pages, addrs, NULL, status, 0) != 0) {
            perror("move_pages");
            exit(1);
        }
        for (long p = 0; p < pages; p++)
            if (status[p] >= 0 && status[p] < MAX_NODES)
                pages_by_node[status[p]]++;
    }
    free(addrs);
    free(status);
}

static void print_nodes(const char *name, const long *pages_by_node) {
    printf("\"%s\": {", name);
    int first = 1;
    for (int node = 0; node < MAX_NODES; node++)
        if (pages_by_node[node]) {
            printf("%s\"%d\": %ld", first ? "" : ", ", node, pages_by_node[node]);
            first = 0;
        }
    printf("}");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: placement DIR\n");
        return 2;
    }
    char ready[4096], placed[4096];
    snprintf(ready, sizeof ready, "%s/ready", argv[1]);
    snprintf(placed, sizeof placed, "%s/placed", argv[1]);
    char *p_objects[12], *u_objects[8];
    for (volatile int i = 0; i < 12; i++) {
        if (i == 4) {
            FILE *f = fopen(ready, "w");
            if (!f)
                return 1;
            fclose(f);
            for (int t = 0; t < 600 && access(placed, F_OK) != 0; t++) {
                void *volatile tick = malloc(16384); /* the library acts on tracked allocations */
                free(tick);
                struct timespec ts = {0, 100 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
            if (access(placed, F_OK) != 0) {
                fprintf(stderr, "never placed\n");
                return 1;
            }
        }
        p_objects[i] = site_p();
        memset(p_objects[i], i, OBJECT_BYTES);
    }
    for (int i = 0; i < 8; i++) {
        u_objects[i] = site_u();
        memset(u_objects[i], i, OBJECT_BYTES);
    }
    long placed_nodes[MAX_NODES] = {0}, unplaced_nodes[MAX_NODES] = {0};
    count_nodes(p_objects + 4, 8, placed_nodes);
    count_nodes(u_objects, 8, unplaced_nodes);
    printf("{");
    print_nodes("placed", placed_nodes);
    printf(", ");
    print_nodes("unplaced", unplaced_nodes);
    printf("}\n");
    return 0;
}
