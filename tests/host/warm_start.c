/*
 * Warm start, as a program sees it: run under libobjtier.so with a daemon, twice.
 *
 *   warm_start DIR learn   site A's first two objects come from unbound memory; then the program
 *                          writes DIR/ready and waits for DIR/placed (the harness places site A
 *                          in tier 0 with `objtier place`, which the daemon saves for this
 *                          program), and site A's third object must come from bound memory
 *                          (numa_maps "prefer").
 *   warm_start DIR warm    the next run: all three objects of site A must come from bound memory
 *                          from the first one on (the daemon placed the site when the program
 *                          attached, from what it saved).
 *   warm_start DIR plain   all three from unbound memory (no warm start).
 *
 * Site A must be one call path in every mode: one call instruction, in a loop without branches
 * (the compiler may duplicate a loop body that has them, and with it the call). Prints
 * "warm ok" on success; otherwise "FAIL: ..." and exits 1.
 */
#define _GNU_SOURCE
#include "objtier.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SITE_A_BYTES (200 * 1024)

static void fail(const char *what) {
    printf("FAIL: %s\n", what);
    exit(1);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A tracked allocation from another site: tracked allocations drive the lazy attach. */
static void tick_allocation(void) {
    void *volatile p = malloc(16384);
    free(p);
}

__attribute__((noinline)) static char *site_a(void) {
    char *p = malloc(SITE_A_BYTES);
    if (!p)
        fail("malloc in site A");
    memset(p, 0xa5, SITE_A_BYTES);
    return p;
}

/* 1 if the mapping holding addr has a "prefer" memory policy in numa_maps. */
static int bound(const void *addr) {
    FILE *f = fopen("/proc/self/numa_maps", "r");
    if (!f)
        fail("open /proc/self/numa_maps");
    char line[4096], policy[128] = "";
    uintptr_t best = 0;
    while (fgets(line, sizeof line, f)) {
        uintptr_t start;
        char p[128];
        if (sscanf(line, "%lx %127s", &start, p) == 2 && start <= (uintptr_t)addr && start >= best) {
            best = start;
            snprintf(policy, sizeof policy, "%s", p);
        }
    }
    fclose(f);
    return strncmp(policy, "prefer", 6) == 0;
}

static int exists(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static const char *dir, *mode;

/* Before site A's object i: a learning run waits for the harness to place the site. */
__attribute__((noinline)) static void before(int i) {
    if (strcmp(mode, "learn") != 0 || i != 2)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/ready", dir);
    FILE *ready = fopen(path, "w");
    if (!ready)
        fail("write the ready file");
    fclose(ready);
    for (int t = 0; t < 600 && !exists(dir, "placed"); t++) {
        tick_allocation();
        sleep_ms(50);
    }
    if (!exists(dir, "placed"))
        fail("the harness never placed site A");
}

/* After it: is it where this mode says? */
__attribute__((noinline)) static void check(int i, const char *object) {
    int want = strcmp(mode, "warm") == 0 || (strcmp(mode, "learn") == 0 && i == 2);
    if (bound(object) != want) {
        printf("FAIL: site A's object %d (%s run) comes from %s memory\n", i, mode,
               want ? "unbound" : "bound");
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: warm_start DIR learn|warm|plain\n");
        return 2;
    }
    dir = argv[1];
    mode = argv[2];
    if (!objtier_available())
        fail("not running under libobjtier.so");
    /* Attach, and wait until the daemon has described the tiers: it has then handled the
     * attach, and so placed the sites it remembers for this program. */
    char *probe = malloc(64 * 1024);
    memset(probe, 1, 64 * 1024);
    int tier = -1;
    for (int i = 0; i < 100 && tier < 0; i++) {
        tier = objtier_tier_of(probe);
        if (tier < 0) {
            tick_allocation();
            sleep_ms(100);
        }
    }
    if (tier < 0)
        fail("never attached to a daemon");
    char *objects[3];
    for (volatile int i = 0; i < 3; i++) {
        before(i);
        objects[i] = site_a();
        check(i, objects[i]);
    }
    for (int i = 0; i < 3; i++)
        free(objects[i]);
    free(probe);
    puts("warm ok");
    return 0;
}
