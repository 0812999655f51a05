"""An allocation-heavy Python program with a deterministic checksum.

tests/host/run runs it with and without libobjtier.so preloaded and compares the last line,
`checksum <hex>`: the same bytes must come out whatever allocator is underneath. It exercises
sizes on both sides of the 4 KiB tracking threshold up to tens of MiB, containers, string
building, JSON round trips, realloc-style growth, and threads allocating and freeing at once.

    alloc_workload.py [--hold SECONDS] [--ready-file PATH] [--seconds SECONDS]

--hold keeps big objects alive and sleeps before exiting (after writing --ready-file), so a test
can ask the daemon about the running process. --seconds repeats the workload until that much
time has passed (the checksum covers the first round, so it stays deterministic).
"""

import argparse
import hashlib
import json
import random
import threading
import time


def containers(rng, digest):
    # Lists and dicts of many sizes: small ones live in the small-object allocator, their
    # backing arrays cross 4 KiB and beyond as they grow.
    for n in (10, 500, 5_000, 50_000, 400_000):
        values = [rng.randrange(1 << 30) for _ in range(n)]
        table = {v: i for i, v in enumerate(values)}
        digest.update(str(sum(values) % 1_000_003).encode())
        digest.update(str(len(table)).encode())
        values.sort()
        digest.update(repr(values[: min(n, 50)]).encode())
        del table


def buffers(rng, digest):
    # bytearrays and bytes from 1 B to 48 MiB, each filled and hashed.
    sizes = [1, 7, 100, 4095, 4096, 4097, 65_536, 1 << 20, 5 << 20, 48 << 20]
    sizes += [rng.randrange(1, 2 << 20) for _ in range(40)]
    for size in sizes:
        seed = rng.randrange(256)
        buf = bytearray(size)
        step = max(1, size // 4096)
        for i in range(0, size, step):
            buf[i] = (seed + i) & 0xFF
        digest.update(hashlib.sha256(buf).digest())
        copy = bytes(buf)
        assert copy == buf
        del buf, copy


def growth(digest):
    # realloc-style growth: extend one bytearray from nothing to 32 MiB, shrink it, grow again.
    buf = bytearray()
    chunk = bytes(range(256)) * 16
    while len(buf) < (32 << 20):
        buf.extend(chunk)
        if len(buf) % (1 << 20) == 0:
            buf[-1] ^= 0x5A
    digest.update(hashlib.sha256(buf).digest())
    del buf[4096:]
    digest.update(hashlib.sha256(buf).digest())
    buf.extend(b"x" * (3 << 20))
    digest.update(hashlib.sha256(buf).digest())


def strings(rng, digest):
    # String building: repeated concatenation (CPython resizes in place) and joins.
    text = ""
    for i in range(20_000):
        text += chr(97 + rng.randrange(26)) * (1 + i % 7)
    parts = [text[i : i + 1000] for i in range(0, len(text), 997)]
    joined = "|".join(parts)
    digest.update(hashlib.sha256(joined.encode()).digest())
    digest.update(str(joined.count("a")).encode())


def json_round_trips(rng, digest):
    for n in (10, 1_000, 50_000):
        doc = {
            "items": [
                {"id": i, "name": "item-%d" % i, "tags": ["t%d" % (i % 13)] * (i % 5)}
                for i in range(n)
            ],
            "blob": "z" * rng.randrange(1, 100_000),
        }
        text = json.dumps(doc, sort_keys=True)
        back = json.loads(text)
        assert back == doc
        digest.update(hashlib.sha256(text.encode()).digest())


def threads(digest):
    # Threads allocate, hand objects to each other through a shared list, and free them.
    shared = [None] * 64
    lock = threading.Lock()
    results = [None] * 6

    def work(index):
        rng = random.Random(1000 + index)
        h = hashlib.sha256()
        for i in range(3_000):
            size = rng.choice((16, 200, 3000, 5000, 70_000, 600_000))
            obj = bytes([index]) * size
            slot = rng.randrange(len(shared))
            with lock:
                old, shared[slot] = shared[slot], obj
            if old is not None:
                # Another thread's object: its contents are whatever it wrote.
                assert old == bytes([old[0]]) * len(old)
            h.update(size.to_bytes(4, "little"))
        results[index] = h.hexdigest()

    workers = [threading.Thread(target=work, args=(i,)) for i in range(len(results))]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    for r in results:
        digest.update(r.encode())


def workload():
    rng = random.Random(20240501)
    digest = hashlib.sha256()
    containers(rng, digest)
    buffers(rng, digest)
    growth(digest)
    strings(rng, digest)
    json_round_trips(rng, digest)
    threads(digest)
    return digest.hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hold", type=float, default=0)
    parser.add_argument("--ready-file")
    parser.add_argument("--seconds", type=float, default=0)
    args = parser.parse_args()

    started = time.monotonic()
    checksum = workload()
    rounds = 1
    while time.monotonic() - started < args.seconds:
        again = workload()
        if again != checksum:
            print("checksum changed in round %d: %s != %s" % (rounds + 1, again, checksum))
            raise SystemExit(1)
        rounds += 1
    if args.hold > 0:
        # Big objects the daemon should be tracking while we sleep.
        kept = [bytearray(1 << 20) for _ in range(8)]
        if args.ready_file:
            with open(args.ready_file, "w") as f:
                f.write("ready\n")
        time.sleep(args.hold)
        del kept
    print("rounds %d" % rounds)
    print("checksum %s" % checksum)


if __name__ == "__main__":
    main()
