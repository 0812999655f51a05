/*
 * A program that closes every descriptor it did not open itself (as daemons do after fork, with
 * close_range or a loop), the library's daemon socket among them, and then gets that number back
 * for a socket of its own. The library must notice that the number is no longer its socket: it
 * must not read the program's bytes from it (the check of the daemon link reads what the daemon
 * sent) nor write doorbells into it. Then it attaches again on a new socket.
 *
 *   closes_fds
 *
 * Prints "fds ok" on success, else what went wrong, and exits 1.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A tracked allocation, freed: the library checks its daemon link and may ring on these. */
static void tracked_pair(size_t n) {
    unsigned char *volatile p = malloc(n);
    if (!p) exit(1);
    p[0] = 1;
    free(p);
}

/* The library's daemon socket: the socket it moved to a descriptor at or above 1000. */
static int library_socket(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int found = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int fd = atoi(e->d_name);
        struct stat st;
        if (fd >= 1000 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) found = fd;
    }
    closedir(d);
    return found;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(void) {
    int fd = -1;
    for (double t0 = now(); fd < 0 && now() - t0 < 5; usleep(10000)) {
        tracked_pair(8192);
        fd = library_socket();
    }
    if (fd < 0) {
        puts("the library never attached (no socket at fd >= 1000)");
        return 1;
    }
    /* Close everything but stdio, as a daemonising program does. */
    for (int i = 3; i <= fd + 16; i++) close(i);
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0 || dup2(pair[0], fd) != fd) {
        perror("socketpair/dup2");
        return 1;
    }
    close(pair[0]);
    char sent[100];
    for (int i = 0; i < 100; i++) sent[i] = (char)('a' + i % 26);
    if (write(pair[1], sent, sizeof sent) != (ssize_t)sizeof sent) return 1;
    /* Three seconds of tracked allocations: link checks (once a second) and doorbells. */
    for (double t0 = now(); now() - t0 < 3;) {
        for (int i = 0; i < 100; i++) tracked_pair(8192);
        usleep(1000);
    }
    char got[200];
    ssize_t n = recv(fd, got, sizeof got, MSG_DONTWAIT);
    int bad = 0;
    if (n != (ssize_t)sizeof sent || memcmp(got, sent, sizeof sent) != 0) {
        printf("the program's socket lost data: %zd of its 100 bytes left\n", n);
        bad = 1;
    }
    n = recv(pair[1], got, sizeof got, MSG_DONTWAIT);
    if (n > 0) {
        printf("the library wrote %zd byte(s) into the program's socket\n", n);
        bad = 1;
    }
    int again = library_socket();
    if (again < 0 || again == fd) {
        puts("the library did not attach again on a socket of its own");
        bad = 1;
    }
    if (!bad) puts("fds ok");
    return bad;
}
