/*
 * The C API of include/objtier.h, driven the way a program would use it.
 *
 *   api absent                 run WITHOUT libobjtier.so: the weak functions must be NULL
 *   api present DIR            run under libobjtier.so with a daemon: exercises every call, then
 *                              writes DIR/ready and waits for DIR/placed (the test harness places
 *                              site A in tier 0 with `objtier place`); new site-A objects must
 *                              then come from memory bound to tier 0's nodes (numa_maps "prefer").
 *
 * Prints "api ok" on success; otherwise "FAIL: ..." and exits 1.
 */
#define _GNU_SOURCE
#include "objtier.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One tracked allocation, freed: the library checks its daemon link (and serves resyncs) on
 * tracked allocations. Through a volatile pointer: compilers delete free(malloc(n)). */
static void tick_allocation(size_t n) {
    void *volatile p = malloc(n);
    free(p);
}
#include <unistd.h>

#define SITE_A_BYTES (200 * 1024)

static void fail(const char *what) {
    printf("FAIL: %s (errno %d: %s)\n", what, errno, strerror(errno));
    exit(1);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The one allocation site the harness places; noinline keeps it a distinct call path. */
__attribute__((noinline)) static void *site_a(void) {
    char *p = malloc(SITE_A_BYTES);
    if (!p)
        fail("malloc in site A");
    memset(p, 0xa5, SITE_A_BYTES);
    return p;
}

/* The memory policy numa_maps shows for the mapping holding addr ("default", "prefer:0", ...). */
static void policy_of(const void *addr, char *out, size_t outlen) {
    FILE *f = fopen("/proc/self/numa_maps", "r");
    if (!f)
        fail("open /proc/self/numa_maps");
    char line[4096];
    uintptr_t best = 0;
    out[0] = 0;
    /* numa_maps lists each mapping's start: the mapping holding addr is the last start <= addr. */
    while (fgets(line, sizeof line, f)) {
        uintptr_t start;
        char policy[128];
        if (sscanf(line, "%lx %127s", &start, policy) == 2 && start <= (uintptr_t)addr &&
            start >= best) {
            best = start;
            snprintf(out, outlen, "%s", policy);
        }
    }
    fclose(f);
}

static int exists(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "absent") == 0) {
        if (objtier_available() || objtier_advise || objtier_set_priority)
            fail("objtier functions resolved without libobjtier.so loaded");
        puts("api ok");
        return 0;
    }
    if (argc < 3 || strcmp(argv[1], "present") != 0) {
        fprintf(stderr, "usage: api absent | api present DIR\n");
        return 2;
    }
    const char *dir = argv[2];
    if (!objtier_available())
        fail("objtier_available() is false under LD_PRELOAD=libobjtier.so");

    /* A touched tracked object; wait until the daemon has described the tiers. */
    char *p = malloc(64 * 1024);
    memset(p, 1, 64 * 1024);
    int tier = -1;
    for (int i = 0; i < 100 && tier < 0; i++) {
        tier = objtier_tier_of(p);
        if (tier < 0 && errno != ENOTCONN)
            fail("objtier_tier_of on a touched page");
        if (tier < 0) {
            tick_allocation(16384); /* tracked allocations drive the lazy attach */
            sleep_ms(100);
        }
    }
    if (tier != 0)
        fail("objtier_tier_of of a touched page is not tier 0 on a one-node host");
    char *untouched = malloc(1 << 20);
    errno = 0;
    if (objtier_tier_of(untouched + 512 * 1024) != -1 || errno != ENOENT)
        fail("objtier_tier_of of an untouched page must fail with ENOENT");

    errno = 0;
    if (objtier_set_priority(5000) != -1 || errno != EINVAL)
        fail("objtier_set_priority(5000) must fail with EINVAL");
    if (objtier_set_priority(5) != 0)
        fail("objtier_set_priority(5)");
    errno = 0;
    if (objtier_advise(p, 64 * 1024, 1u << 20) != -1 || errno != EINVAL)
        fail("unknown advice bits must fail with EINVAL");
    errno = 0;
    if (objtier_advise(p, 0, OBJTIER_ADVICE_HOT) != -1 || errno != EINVAL)
        fail("an empty range must fail with EINVAL");
    if (objtier_advise(p, 64 * 1024, OBJTIER_ADVICE_HOT | OBJTIER_ADVICE_READ_MOSTLY) != 0)
        fail("objtier_advise");

    /* Site A: one call path (one call instruction, in a loop), three objects before the
     * placement, which the harness finds in `objtier status --json`, and one after. */
    void *site_a_objects[4];
    char path[4096];
    for (volatile int i = 0; i < 4; i++) {
        if (i == 3) {
            snprintf(path, sizeof path, "%s/ready", dir);
            FILE *ready = fopen(path, "w");
            if (!ready)
                fail("write the ready file");
            fclose(ready);
            for (int t = 0; t < 600 && !exists(dir, "placed"); t++) {
                tick_allocation(16384);
                sleep_ms(50);
            }
            if (!exists(dir, "placed"))
                fail("the harness never placed site A");
        }
        site_a_objects[i] = site_a();
    }
    void **before = site_a_objects;
    void *after = site_a_objects[3];

    char policy[128];
    policy_of(before[0], policy, sizeof policy);
    if (strncmp(policy, "prefer", 6) == 0)
        fail("an object allocated before the placement is in a bound chunk");
    policy_of(after, policy, sizeof policy);
    if (strncmp(policy, "prefer", 6) != 0) {
        printf("FAIL: a site-A object after the placement has policy %s, not prefer\n", policy);
        return 1;
    }
    /* Other sites still get unbound memory. */
    char *other = malloc(300 * 1024);
    memset(other, 2, 300 * 1024);
    policy_of(other, policy, sizeof policy);
    if (strncmp(policy, "prefer", 6) == 0)
        fail("an object of an unplaced site came from a bound chunk");
    /* Contents survive: the placed object is ordinary memory. */
    memset(after, 0x5a, SITE_A_BYTES);
    for (int i = 0; i < SITE_A_BYTES; i++)
        if (((unsigned char *)after)[i] != 0x5a)
            fail("placed object lost its contents");
    for (int i = 0; i < 3; i++)
        free(before[i]);
    free(after);
    free(other);
    free(untouched);
    free(p);
    puts("api ok");
    return 0;
}
