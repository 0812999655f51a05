#!/usr/bin/python3
"""The result line of tierbench-* drivers: checks that each tierbench output (JSON lines) ends
with a summary of a loop that made accesses, and prints, on one line,

    PREFIX: [LABEL ]N accesses, its own fast share S[; [LABEL ]...]

    tierbench_summary.py PREFIX [LABEL=]FILE...

Exits non-zero, naming the file, when a run has no summary or no accesses.
"""
import json
import sys


def summary(path, prefix):
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.startswith("{")]
    s = next((l for l in lines if l.get("event") == "summary"), None)
    if s is None or s["accesses"] <= 0:
        sys.exit(f"{prefix}: no summary or no accesses in {path}")
    return s


def main(argv):
    if len(argv) < 3:
        sys.exit("usage: tierbench_summary.py PREFIX [LABEL=]FILE...")
    prefix, parts = argv[1], []
    for arg in argv[2:]:
        label, _, path = arg.rpartition("=")
        s = summary(path, prefix)
        parts.append(f"{label + ' ' if label else ''}{s['accesses']} accesses, its own fast share {s['fast_share']:.3f}")
    print(f"{prefix}: {'; '.join(parts)}")


if __name__ == "__main__":
    main(sys.argv)
