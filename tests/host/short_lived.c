/*
 * A process that attaches to the daemon and is gone at once: its first tracked allocation starts
 * the attach, then it execs another program (its daemon socket is close-on-exec) or exits, as
 * the short commands of a shell script under `objtier run` do, often before the daemon has read
 * its hello.
 *
 *   short_lived exec|exit
 *
 * exec runs /bin/true (which makes no tracked allocation); exit returns 0 at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2 || (strcmp(argv[1], "exec") != 0 && strcmp(argv[1], "exit") != 0)) {
        fprintf(stderr, "usage: short_lived exec|exit\n");
        return 2;
    }
    unsigned char *volatile p = malloc(64 << 10);
    if (!p) return 1;
    p[0] = 1;
    if (strcmp(argv[1], "exec") == 0) {
        execl("/bin/true", "true", (char *)NULL);
        perror("execl /bin/true");
        return 1;
    }
    return 0;
}
