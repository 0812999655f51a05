"""Clients that misbehave on an objtier daemon's socket; the daemon must refuse them and stay up.

    hostile_client.py SOCKET garbage    # junk bytes, short writes, hellos without a ring, bad JSON
    hostile_client.py SOCKET truncate   # attach a real ring, then shrink its memfd under the daemon
    hostile_client.py SOCKET other-user A_UID B_UID A_PID SITE_STORE A_SOCKET
        # run as root: becomes user B and tries to reach user A's process A_PID, the root
        # daemon's site store, and A's own daemon on A_SOCKET; every attempt must be refused
    hostile_client.py SOCKET exhaust B_UID DAEMON_PID
        # run as root: as user B, a 100 MB control line, silent connections, 1,000 clients at
        # once, a ring announcing 2^30 slots; root must be served meanwhile, the daemon's peak
        # RSS stay within 16 MiB of where it was

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


def hello(ring_bytes, version=WIRE_VERSION, pid=None):
    pid = os.getpid() if pid is None else pid
    return struct.pack(
        "<QIIIiQQQQQ", RING_MAGIC, version, 1, pid, 0, 0, ring_bytes, 4096, 0, 0
    )


def ring_memfd(capacity, sealed=False):
    """A memfd holding a valid, empty ring of `capacity` slots (and its zeroed control area);
    `sealed`: against shrinking, as the library's are."""
    ring = HEADER_BYTES + capacity * SLOT_BYTES
    size = (ring + PAGE - 1) // PAGE * PAGE + CONTROL_BYTES
    fd = os.memfd_create("hostile-ring", os.MFD_ALLOW_SEALING if sealed else 0)
    os.ftruncate(fd, size)
    if sealed:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
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


def control_reply(path, request):
    with connect(path) as s:
        s.sendall(struct.pack("<Q", CONTROL_MAGIC) + json.dumps(request).encode() + b"\n")
        return json.loads(read_line(s))


def other_user(path, a_uid, b_uid, a_pid, site_store, a_socket):
    """User B's attempts on user A's process (on the root daemon at `path`), on the root
    daemon's site store, and on A's own daemon. Starts as root to make a ring memfd that user A
    owns (as a memfd A passed on would be), then becomes B for good."""
    os.setegid(a_uid)
    os.seteuid(a_uid)
    a_ring, a_ring_size = ring_memfd(16, sealed=True)
    os.seteuid(0)
    os.setegid(0)
    os.setgroups([])
    os.setresgid(b_uid, b_uid, b_uid)
    os.setresuid(b_uid, b_uid, b_uid)
    failed = []

    def case(name, check):
        try:
            check()
            print("case %s: refused" % name)
        except Exception as e:  # noqa: BLE001 - report any failure as this case's
            print("case %s: FAILED: %s: %s" % (name, type(e).__name__, e))
            failed.append(name)

    def expect_error(reply, fragment):
        if fragment not in str(reply.get("error", "")):
            raise AssertionError("expected an error mentioning %r, got %r" % (fragment, reply))

    def status_hides_a():
        pids = [p["pid"] for p in status(path)["processes"]]
        if a_pid in pids:
            raise AssertionError("user B's status lists user A's pid %d: %r" % (a_pid, pids))

    case("status-lists-only-own-processes", status_hides_a)
    case("place-on-a", lambda: expect_error(control_reply(path, {
        "cmd": "place", "pid": a_pid, "site": "0x1", "tier": 0}), "only it or root"))
    case("snapshot-of-a", lambda: expect_error(control_reply(path, {
        "cmd": "profile-snapshot", "pid": a_pid}), "another user's process"))

    def hello_claiming_a():
        fd, size = ring_memfd(16, sealed=True)
        send_and_close(path, hello(size, pid=a_pid), [fd])
        os.close(fd)
        status_hides_a()

    case("hello-claiming-a", hello_claiming_a)

    def ring_of_a():
        send_and_close(path, hello(a_ring_size), [a_ring])
        if os.getpid() in [p["pid"] for p in status(path)["processes"]]:
            raise AssertionError("the daemon attached user B with a ring user A owns")

    case("ring-of-a", ring_of_a)

    def write_site_store():
        for target in (site_store, os.path.join(site_store, "planted.json")):
            try:
                with open(os.path.join(target, "x") if target == site_store else target, "w"):
                    pass
            except PermissionError:
                continue
            raise AssertionError("user B could write into %s" % target)

    case("write-site-store", write_site_store)

    def a_daemon():
        try:
            reply = status(a_socket)
        except PermissionError:
            return  # the kernel refused: A's socket is not B's to connect to
        expect_error(reply, "answers only that user and root")

    case("daemon-of-a", a_daemon)
    return 1 if failed else 0


def peak_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM for pid %d" % pid)


def exhaust(path, b_uid, daemon_pid):
    """User B tries to exhaust the daemon; root (this process's real uid) is served meanwhile.
    The connections are B's because they are made with B's effective uid (SO_PEERCRED)."""
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    failed = []

    class AsB:
        def __enter__(self):
            os.setegid(b_uid)
            os.seteuid(b_uid)

        def __exit__(self, *exc):
            os.seteuid(0)
            os.setegid(0)

    def case(name, action):
        try:
            action()
            started = time.monotonic()
            status(path)
            print("case %s: root still served (%.2f s)" % (name, time.monotonic() - started))
        except Exception as e:  # noqa: BLE001 - report any failure as this case's
            print("case %s: FAILED: %s: %s" % (name, type(e).__name__, e))
            failed.append(name)

    def long_line():
        before = peak_rss_kib(daemon_pid)
        chunk = b"x" * (1 << 20)
        sent = 0
        reply = b""
        with AsB():
            s = connect(path)
        with s:
            try:
                s.sendall(struct.pack("<Q", CONTROL_MAGIC))
                for _ in range(100):
                    s.sendall(chunk)
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass
            try:
                reply = read_line(s)
            except ConnectionResetError:
                pass
        after = peak_rss_kib(daemon_pid)
        print("long-line: sent %d MiB before the daemon hung up; daemon peak RSS %d -> %d KiB; "
              "reply %r" % (sent >> 20, before, after, reply[:120]))
        if sent >= 100 << 20:
            raise AssertionError("the daemon read all 100 MiB of one request line")
        if reply and b"request longer than" not in reply:
            raise AssertionError("unexpected reply %r" % reply[:200])
        if after - before > 16 << 10:
            raise AssertionError("peak RSS grew by %d KiB" % (after - before))

    def silent():
        with AsB():
            conns = [connect(path) for _ in range(100)]
        started = time.monotonic()
        status(path)
        took = time.monotonic() - started
        if took > 2:
            raise AssertionError("root waited %.1f s while B's silent clients sat" % took)
        time.sleep(6.5)  # past the daemon's 5 s deadline
        closed = 0
        for c in conns:
            c.settimeout(1)
            try:
                closed += c.recv(1) == b""
            except (ConnectionResetError, socket.timeout):
                pass
            c.close()
        print("silent: %d of 100 silent connections closed by the daemon" % closed)
        if closed != 100:
            raise AssertionError("%d silent connections still open after 6.5 s" % (100 - closed))

    def thousand():
        with AsB():
            conns = []
            for _ in range(1000):
                c = connect(path)
                try:
                    c.sendall(struct.pack("<Q", CONTROL_MAGIC) + b'{"cmd":"status"}\n')
                except (BrokenPipeError, ConnectionResetError):
                    pass
                conns.append(c)
        answered = 0
        for c in conns:
            try:
                answered += b"processes" in read_line(c)
            except (ConnectionResetError, socket.timeout):
                pass
            c.close()
        print("thousand: %d of 1000 clients connecting at once answered" % answered)
        if answered < 64:
            raise AssertionError("only %d answered" % answered)

    def huge_ring():
        capacity = 1 << 30
        size = HEADER_BYTES + capacity * SLOT_BYTES + CONTROL_BYTES
        with AsB():
            fd = os.memfd_create("huge-ring", os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, size)  # sparse: announcing costs nothing
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            os.pwrite(fd, struct.pack("<QIIIIII", RING_MAGIC, WIRE_VERSION, HEADER_BYTES,
                                      SLOT_BYTES, capacity, os.getpid(), 0), 0)
            send_and_close(path, hello(size), [fd])
        os.close(fd)

    case("long-line", long_line)
    case("silent-clients", silent)
    case("thousand-clients", thousand)
    case("huge-ring", huge_ring)
    return 1 if failed else 0


def main():
    if len(sys.argv) == 5 and sys.argv[2] == "exhaust":
        return exhaust(sys.argv[1], int(sys.argv[3]), int(sys.argv[4]))
    if len(sys.argv) == 8 and sys.argv[2] == "other-user":
        a_uid, b_uid, a_pid = (int(a) for a in sys.argv[3:6])
        return other_user(sys.argv[1], a_uid, b_uid, a_pid, sys.argv[6], sys.argv[7])
    if len(sys.argv) != 3 or sys.argv[2] not in ("garbage", "truncate"):
        print(__doc__)
        return 2
    path, mode = sys.argv[1], sys.argv[2]
    return garbage(path) if mode == "garbage" else truncate(path)


if __name__ == "__main__":
    sys.exit(main())
