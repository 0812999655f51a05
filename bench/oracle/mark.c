/* oracle-mark: opens or closes the oracle's measured window (bench/oracle).
 *
 *   oracle-mark start | stop
 *
 * Executes the marker instruction the objtier-oracle QEMU plugin watches for: an 8-byte NOP,
 * `nopl 0x6f72000N(%rax,%rax,1)`, N = 1 (start) or 2 (stop). On real hardware, or in a guest
 * without the plugin, it does nothing. Programs that mark their own windows can emit the same
 * bytes (see OBJTIER_ORACLE_START/STOP below). */
#include <stdio.h>
#include <string.h>

#define OBJTIER_ORACLE_START() __asm__ volatile(".byte 0x0f, 0x1f, 0x84, 0x00, 0x01, 0x00, 0x72, 0x6f" ::: "memory")
#define OBJTIER_ORACLE_STOP() __asm__ volatile(".byte 0x0f, 0x1f, 0x84, 0x00, 0x02, 0x00, 0x72, 0x6f" ::: "memory")

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "start") == 0) {
        OBJTIER_ORACLE_START();
    } else if (argc == 2 && strcmp(argv[1], "stop") == 0) {
        OBJTIER_ORACLE_STOP();
    } else {
        fprintf(stderr, "usage: oracle-mark start|stop\n");
        return 2;
    }
    return 0;
}
