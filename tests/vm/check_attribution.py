#!/usr/bin/env python3
"""Checks that a tiering daemon's hottest records are tierbench's hot objects.

    check_attribution.py TIERBENCH_JSON STATUS_JSON [--top N]

TIERBENCH_JSON is `tierbench hotcold --json` output (its setup event lists every object's
address; the last `hot` objects are hot); STATUS_JSON is `objtier status --json` taken while
tierbench ran. Passes if the daemon's N hottest records of that process (by EMA of sampled
accesses) all lie inside hot objects. Prints what it saw either way.
"""
import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tierbench")
    parser.add_argument("status")
    parser.add_argument("--top", type=int, default=2)
    args = parser.parse_args()
    events = [json.loads(l) for l in open(args.tierbench) if l.startswith("{")]
    setup = next(e for e in events if e.get("event") == "setup")
    size = setup["size_bytes"]
    addresses = [int(a, 16) for a in setup["addresses"]]
    hot = [(a, a + size) for a in addresses[-setup["hot"]:]]
    status = json.load(open(args.status))
    processes = [p for p in status["processes"] if p["hottest_records"]]
    if not processes:
        print(f"no attached process has sampled records: {[p['pid'] for p in status['processes']]}")
        return 1
    records = max(processes, key=lambda p: p["tracked_bytes"])["hottest_records"][: args.top]
    inside = [any(lo <= int(r["start"], 16) < hi for lo, hi in hot) for r in records]
    for r, ok in zip(records, inside):
        print(f"  record {r['start']} ({r['len'] >> 20} MiB) ema {r['ema_accesses']:.0f}: {'hot' if ok else 'NOT hot'}")
    if len(records) < args.top:
        print(f"only {len(records)} records with samples, wanted {args.top}")
        return 1
    return 0 if all(inside) else 1


if __name__ == "__main__":
    sys.exit(main())
