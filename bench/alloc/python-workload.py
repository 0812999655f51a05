"""python workload for bench/alloc/run: allocation-heavy pure Python.

Builds and drops lists, dicts, strings and bytearrays of many sizes (small ones come from
CPython's own pymalloc arenas, anything over 512 bytes from malloc), grows containers past many
resize points, and round-trips nested structures through json. Prints a digest of what it built,
which must be the same under every allocator.
"""
import hashlib
import json
import random

rng = random.Random(20240301)
digest = hashlib.sha256()


def records(n):
    return [
        {
            "id": i,
            "name": "item-%d-%s" % (i, "x" * rng.randrange(1, 64)),
            "tags": [rng.randrange(1000) for _ in range(rng.randrange(0, 12))],
            "score": rng.random(),
            "blob": "y" * rng.choice((8, 100, 700, 3000, 20000)),
        }
        for i in range(n)
    ]


for round_number in range(10):
    # json round-trips of nested records, with large strings in some of them.
    data = records(3000)
    text = json.dumps(data, sort_keys=True)
    back = json.loads(text)
    assert back == data
    digest.update(hashlib.sha256(text.encode()).digest())

    # dicts growing through every resize, then half deleted, then rebuilt by comprehension.
    table = {}
    for i in range(60000):
        table["k%d" % (i * 7919 % 100003)] = [i] * (i % 9)
    for key in list(table)[::2]:
        del table[key]
    table = {k: len(v) for k, v in table.items()}
    digest.update(str(sum(table.values())).encode())

    # strings built by joining and by repeated concatenation, then split again.
    parts = ["%x" % rng.getrandbits(rng.choice((8, 64, 512, 4096))) for _ in range(8000)]
    joined = ",".join(parts)
    grown = ""
    for part in parts[:1500]:
        grown += part
    digest.update(str(len(joined.split(",")) + len(grown)).encode())

    # bytearrays of sizes from bytes to a megabyte, grown in place and sliced.
    buffers = []
    for i in range(400):
        size = rng.choice((16, 200, 1500, 5000, 40000, 300000, 1 << 20))
        buf = bytearray(size)
        buf[::4096] = b"\x01" * len(buf[::4096])
        buf.extend(b"z" * (size // 3))
        buffers.append(buf[size // 4:])
        if len(buffers) > 64:
            buffers.pop(rng.randrange(len(buffers)))
    digest.update(str(sum(len(b) for b in buffers)).encode())

    # lists of tuples sorted and sliced: many short-lived small objects.
    pairs = sorted((rng.random(), str(i)) for i in range(40000))
    digest.update(pairs[len(pairs) // 2][1].encode())

print("python", digest.hexdigest())
