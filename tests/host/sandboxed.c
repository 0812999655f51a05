/* sandboxed: a program that confines itself with a seccomp filter, as sshd's privilege-separated
 * child, a service under systemd's SystemCallFilter= or a program using libseccomp does: a call
 * the filter refuses kills the process (SIGSYS). The filter here refuses what only talks to a
 * daemon or places memory (sockets, poll, fstat, memfd_create, mbind, move_pages...), and allows
 * what any allocator needs (mmap, munmap, madvise, futex). Under objtier the library must stop
 * its own calls to the daemon when the program installs a filter, and never start them in a
 * program started under one.
 *
 *   sandboxed prctl     allocates (and so attaches to a daemon), installs the filter with
 *                       prctl(PR_SET_SECCOMP), then allocates, frees and forks for 2.5 s
 *   sandboxed syscall   the same, installing it with syscall(SYS_seccomp), as libseccomp does
 *   sandboxed exec      installs the filter (without the stat calls: the loader needs them),
 *                       then execs itself as `sandboxed inside`
 *   sandboxed inside    allocates, frees and forks for 2.5 s under the filter it was started with
 *
 * Every object is filled with a pattern and checked when freed. Prints "sandboxed ok OBJECTS"
 * when it lived to the end with its data intact, and its child did too. */
#define _GNU_SOURCE
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "sandboxed.c knows x86_64 and aarch64"
#endif

#define LIVE 256

static void say(const char *text) {
    ssize_t n = write(1, text, strlen(text));
    (void)n;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x5EED0007;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

struct object {
    unsigned char *data;
    size_t size;
    unsigned char tag;
};

static unsigned long churn(double seconds) {
    static struct object live[LIVE];
    unsigned long made = 0, bad = 0;
    double end = now() + seconds;
    while (now() < end) {
        struct object *o = &live[next() % LIVE];
        if (o->data) {
            for (size_t i = 0; i < o->size; i += 512)
                bad += o->data[i] != (unsigned char)(o->tag + i / 512);
            free(o->data);
        }
        o->size = 4096 + next() % (256 << 10);
        o->tag = (unsigned char)next();
        o->data = malloc(o->size);
        if (!o->data) {
            say("sandboxed: malloc failed\n");
            exit(1);
        }
        for (size_t i = 0; i < o->size; i += 512)
            o->data[i] = (unsigned char)(o->tag + i / 512);
        made++;
    }
    for (int i = 0; i < LIVE; i++) {
        free(live[i].data);
        live[i].data = NULL;
    }
    if (bad) {
        say("sandboxed: objects lost their contents\n");
        exit(1);
    }
    return made;
}

static int refused[] = {
    SYS_socket, SYS_connect, SYS_sendto, SYS_sendmsg, SYS_recvfrom, SYS_recvmsg, SYS_ppoll,
#ifdef SYS_poll
    SYS_poll,
#endif
    SYS_memfd_create, SYS_mbind, SYS_get_mempolicy, SYS_move_pages, SYS_set_mempolicy,
    /* the last three only at run time: the dynamic loader of an exec needs them */
    SYS_fstat, SYS_newfstatat, SYS_statx,
};

static struct sock_fprog filter(int with_stat) {
    static struct sock_filter f[64];
    int n = 0, count = sizeof refused / sizeof refused[0] - (with_stat ? 0 : 3);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    for (int i = 0; i < count; i++) {
        f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)refused[i], 0, 1);
        f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
    }
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    return (struct sock_fprog){.len = (unsigned short)n, .filter = f};
}

static void confine(const char *how, int with_stat) {
    struct sock_fprog prog = filter(with_stat);
    int rc;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        perror("sandboxed: PR_SET_NO_NEW_PRIVS");
        exit(2);
    }
    if (strcmp(how, "syscall") == 0)
        rc = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
    else
        rc = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
    if (rc != 0) {
        perror("sandboxed: installing the seccomp filter");
        exit(2);
    }
}

/* Allocates under the filter for 2.5 s, a forked child for 1.2 s of it. */
static int confined_work(void) {
    pid_t child = fork();
    if (child < 0) {
        say("sandboxed: fork failed\n");
        return 1;
    }
    if (child == 0) {
        churn(1.2);
        _exit(0);
    }
    unsigned long made = churn(2.5);
    int status;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char line[96];
        snprintf(line, sizeof line, "sandboxed: the forked child died (wait status %#x)\n", status);
        say(line);
        return 1;
    }
    char line[64];
    snprintf(line, sizeof line, "sandboxed ok %lu\n", made);
    say(line);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "prctl") == 0 || strcmp(mode, "syscall") == 0) {
        churn(1.5); /* attached by now, if a daemon listens */
        confine(mode, 1);
        return confined_work();
    }
    if (strcmp(mode, "exec") == 0) {
        confine("prctl", 0);
        execl("/proc/self/exe", argv[0], "inside", (char *)NULL);
        perror("sandboxed: exec");
        return 2;
    }
    if (strcmp(mode, "inside") == 0)
        return confined_work();
    fprintf(stderr, "usage: sandboxed prctl|syscall|exec\n");
    return 2;
}
