"""Clients that misbehave on an objtier daemon's socket; the daemon must refuse them and stay up.

    hostile_client.py SOCKET garbage    # junk bytes, short writes, hellos without a ring, bad JSON
    hostile_client.py SOCKET truncate   # attach a real ring, then shrink its memfd under the daemon

Each case prints `case NAME: ...`; after each one the daemon must still answer a status request.
Exit status 0 when every case passed, 1 otherwise (the failing case says why).

The wire format mirrored here is crates/wire/src/lib.rs (Hello, RingHeader, Slot).
"""

import json
import fcntl
import os
import random
import socket
import struct
import sys
import time

RING_MAGIC = int.from_bytes(b"OBJTIER1", "little")
CONTROL_MAGIC = int.from_bytes(b"OBJTCTL1", "little")
WIRE_VERSION = 4
HEADER_BYTES = 256
SLOT_BYTES = 48
PAGE = 4096
# The control area after the ring: 256 bytes of header, then 4096 site slots of 16 bytes.
CONTROL_BYTES = 256 + 4096 * 16


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    return s


def status(path):
    """The daemon's status reply, or raises if it does not answer."""
    with connect(path) as s:
        s.sendall(struct.pack("<Q", CONTROL_MAGIC) + b'{"cmd":"status"}\n')
        return json.loads(read_line(s))


def read_line(s):
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def hello(ring_bytes, version=WIRE_VERSION):
    return struct.pack(
        "<QIIIiQQQQQ", RING_MAGIC, version, 1, os.getpid(), 0, 0, ring_bytes, 4096, 0, 0
    )


def ring_memfd(capacity):
    """A memfd holding a valid, empty ring of `capacity` slots (and its zeroed control area)."""
    ring = HEADER_BYTES + capacity * SLOT_BYTES
    size = (ring + PAGE - 1) // PAGE * PAGE + CONTROL_BYTES
    fd = os.memfd_create("hostile-ring")
    os.ftruncate(fd, size)
    header = struct.pack("<QIIIIII", RING_MAGIC, WIRE_VERSION, HEADER_BYTES, SLOT_BYTES, capacity,
                         os.getpid(), 0)
    os.pwrite(fd, header, 0)
    # Zeroed slots are free ones: nothing else to write.
    return fd, size


def send_and_close(path, payload, fds=()):
    with connect(path) as s:
        if fds:
            socket.send_fds(s, [payload], list(fds))
        else:
            s.sendall(payload)
        time.sleep(0.3)  # let the daemon read it before the hang-up


def garbage(path):
    rng = random.Random(7)
    cases = []

    def case(name, action, expect_reply=None):
        try:
            reply = action()
            if expect_reply is not None:
                expect_reply(reply)
            status(path)
            print("case %s: daemon still answers" % name)
        except Exception as e:  # noqa: BLE001 - report any failure as this case's
            print("case %s: FAILED: %s: %s" % (name, type(e).__name__, e))
            cases.append(name)

    junk = bytes(rng.randrange(256) for _ in range(4096))
    case("random-bytes", lambda: send_and_close(path, junk))
    case("three-bytes", lambda: send_and_close(path, b"\x01\x02\x03"))
    case("connect-and-close", lambda: send_and_close(path, b""))
    case("hello-without-fd", lambda: send_and_close(path, hello(1 << 20)))
    case("short-hello", lambda: send_and_close(path, hello(1 << 20)[:20]))
    case("hello-wrong-version", lambda: send_and_close(path, hello(1 << 20, version=99)))

    def hello_with_wrong_size():
        fd, size = ring_memfd(16)
        try:
            send_and_close(path, hello(size * 2), [fd])
        finally:
            os.close(fd)

    case("hello-ring-size-mismatch", hello_with_wrong_size)

    def hello_with_garbage_ring():
        fd = os.memfd_create("junk")
        os.write(fd, junk)
        try:
            send_and_close(path, hello(len(junk)), [fd])
        finally:
            os.close(fd)

    case("hello-garbage-ring", hello_with_garbage_ring)

    def control(line):
        def run():
            with connect(path) as s:
                s.sendall(struct.pack("<Q", CONTROL_MAGIC) + line)
                return json.loads(read_line(s))
        return run

    def expect_error(fragment):
        def check(reply):
            if fragment not in str(reply.get("error", "")):
                raise AssertionError("expected an error mentioning %r, got %r" % (fragment, reply))
        return check

    case("control-not-json", control(b"this is not json\n"), expect_error("malformed request"))
    case("control-unknown-command", control(b'{"cmd":"explode"}\n'),
         expect_error("unknown command"))
    case("control-no-cmd", control(b'{"hello":1}\n'), expect_error('no "cmd"'))

    # A client that connects and says nothing must not stop others from being served.
    silent = connect(path)
    started = time.monotonic()
    case("silent-client", lambda: None)
    if time.monotonic() - started > 2:
        print("case silent-client: FAILED: status took %.1f s while a client sat silent"
              % (time.monotonic() - started))
        cases.append("silent-client-latency")
    silent.close()

    return 1 if cases else 0


def truncate(path):
    """A ring memfd that could shrink under the daemon's mapping would turn the daemon's next
    read into SIGBUS. The daemon must refuse rings not sealed with F_SEAL_SHRINK, and stay up;
    a sealed ring then cannot be shrunk at all."""
    fd, size = ring_memfd(1024)  # unsealed
    s = connect(path)
    socket.send_fds(s, [hello(size)], [fd])
    time.sleep(1.0)
    pid = os.getpid()
    try:
        pids = [p["pid"] for p in status(path).get("processes", [])]
    except Exception as e:  # noqa: BLE001
        print("case truncate: FAILED: the daemon stopped answering after an unsealed ring "
              "(%s: %s)" % (type(e).__name__, e))
        return 1
    if pid in pids:
        print("case truncate: FAILED: the daemon attached an unsealed (shrinkable) ring")
        return 1
    s.close()
    # With the seal, the attack is impossible: the kernel refuses to shrink the memfd.
    fd2 = os.memfd_create("sealed-ring", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd2, size)
    fcntl.fcntl(fd2, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    try:
        os.ftruncate(fd2, 0)
        print("case truncate: FAILED: a memfd sealed with F_SEAL_SHRINK could be shrunk")
        return 1
    except PermissionError:
        pass
    os.close(fd)
    os.close(fd2)
    print("case truncate: unsealed ring refused, daemon still answers, sealed ring cannot shrink")
    return 0


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("garbage", "truncate"):
        print(__doc__)
        return 2
    path, mode = sys.argv[1], sys.argv[2]
    return garbage(path) if mode == "garbage" else truncate(path)


if __name__ == "__main__":
    sys.exit(main())
