/*
 * objtier.h: what a program can tell objtier about its own memory.
 *
 * objtier tiers unmodified programs; this header is for programs that know better than any
 * profile which of their data is hot, cold or latency-critical. The functions live in
 * libobjtier.so, which is LD_PRELOADed (`objtier run -- ./app`); a program does NOT link
 * against it. The declarations are weak, so the same binary runs with and without objtier:
 * without it the functions are NULL, and objtier_available() says so.
 *
 *     #include <objtier.h>
 *     ...
 *     double *table = malloc(n * sizeof *table);
 *     if (objtier_available())
 *         objtier_advise(table, n * sizeof *table, OBJTIER_ADVICE_HOT | OBJTIER_ADVICE_READ_MOSTLY);
 *
 * Advice goes to the objtier daemon, which weighs it with what it measures; it is a request,
 * not a guarantee (a tier can be full, and higher-priority programs win). Nothing here blocks
 * or allocates. Licensed MIT OR Apache-2.0, like the rest of objtier.
 */
#ifndef OBJTIER_H
#define OBJTIER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Advice bits for objtier_advise(); combine with |. 0 clears earlier advice on the range. */
#define OBJTIER_ADVICE_PREFER_FAST (1u << 0)       /* keep in the fastest tier if it has room */
#define OBJTIER_ADVICE_REQUIRE_FAST (1u << 1)      /* fastest tier, ahead of unadvised data */
#define OBJTIER_ADVICE_PREFER_SLOW (1u << 2)       /* keep out of fast tiers unless room to spare */
#define OBJTIER_ADVICE_REQUIRE_SLOW (1u << 3)      /* slowest tier */
#define OBJTIER_ADVICE_HOT (1u << 4)               /* rank as hot before samples show it */
#define OBJTIER_ADVICE_COLD (1u << 5)              /* rank as cold before samples show it */
#define OBJTIER_ADVICE_READ_MOSTLY (1u << 6)       /* mostly read */
#define OBJTIER_ADVICE_WRITE_MOSTLY (1u << 7)      /* mostly written */
#define OBJTIER_ADVICE_SCRATCH (1u << 8)           /* short-lived: not worth migrating */
#define OBJTIER_ADVICE_LATENCY_SENSITIVE (1u << 9) /* like PREFER_FAST */

/*
 * Sets this process's priority for the fast tiers (higher wins; 0 is the default; the same as
 * OBJTIER_PRIORITY=N in the environment). Returns 0, or -1 with errno EINVAL for a priority
 * outside [-1000, 1000]. Takes effect at once if a daemon is attached, else when one attaches.
 */
int objtier_set_priority(int priority) __attribute__((weak));

/*
 * Advises on the memory [addr, addr + len) (widened to whole pages). The advice applies to the
 * objects objtier tracks in the range (heap objects of at least OBJTIER_TRACK_MIN bytes, 4 KiB
 * by default) until they are freed or the advice is cleared with hints 0; objtier does not tier
 * other memory, so advice on it has no effect. Returns 0 once the advice is on its way to the
 * daemon; -1 with errno EINVAL for unknown bits or an empty or wrapping range, ENOTCONN when no
 * daemon is attached (the advice is not kept: give it again, or set a site placement), EAGAIN
 * when the channel to the daemon is momentarily full.
 */
int objtier_advise(void *addr, size_t len, unsigned hints) __attribute__((weak));

/*
 * The tier (0 = fastest) of the page holding addr right now, as the daemon numbers them.
 * Returns -1 with errno ENOENT when the page is not resident (never touched, or swapped out),
 * EFAULT when addr is not mapped, ENOTCONN when no daemon has described the tiers yet, EPERM
 * when the program runs under a seccomp filter (objtier then makes no system call of its own).
 */
int objtier_tier_of(const void *addr) __attribute__((weak));

/*
 * Says that the program enters phase `phase` (0, 1, ... as the program numbers them; the same
 * numbers in every run). With per-phase guidance (objtier advise --phases, objtier run
 * --placement) the daemon moves each group of allocation sites to its tier for the phase at
 * once, instead of waiting to detect the change from sampled accesses; without it the call is
 * recorded and does nothing else. Returns 0 once the mark is on its way to the daemon; -1 with
 * errno ENOTCONN when no daemon is attached, EAGAIN when the channel to the daemon is
 * momentarily full.
 */
int objtier_phase(unsigned phase) __attribute__((weak));

/* Non-zero when libobjtier.so is loaded in this process. */
static inline int objtier_available(void) { return objtier_tier_of != NULL; }

#ifdef __cplusplus
}
#endif

#endif /* OBJTIER_H */
