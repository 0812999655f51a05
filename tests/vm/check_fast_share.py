#!/usr/bin/env python3
"""Judges a tierbench --json run from its own ground truth (never from objtier's counters).

  check_fast_share.py RUN.json --below 0.4
      the run's overall fast_share is below 0.4 (the baseline left the hot objects slow)
  check_fast_share.py RUN.json --reach 0.9 --within 10
      some tick at t <= 10 s (after the hot loop started) has fast_share >= 0.9, and every
      later tick, to the end of the run, stays >= 0.9
  --max-fast-bytes N  additionally: at the end, at most N bytes of the objects are on fast nodes
"""
import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--below", type=float)
    ap.add_argument("--reach", type=float)
    ap.add_argument("--within", type=float, default=10.0)
    ap.add_argument("--max-fast-bytes", type=int)
    args = ap.parse_args()

    events = []
    with open(args.run) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                events.append(json.loads(line))
    ticks = [e for e in events if e.get("event") == "tick"]
    summary = next((e for e in events if e.get("event") == "summary"), None)
    if summary is None or not ticks:
        print(f"FAIL: {args.run} has no summary or no ticks: the workload did not finish")
        return 1
    timeline = " ".join(f"{t['t']:.0f}s:{t['fast_share']:.2f}" for t in ticks)
    print(f"fast_share per second: {timeline}; overall {summary['fast_share']:.3f}")
    ok = True
    if args.below is not None and not summary["fast_share"] < args.below:
        print(f"FAIL: overall fast_share {summary['fast_share']:.3f} is not below {args.below}")
        ok = False
    if args.reach is not None:
        first = next((i for i, t in enumerate(ticks) if t["fast_share"] >= args.reach), None)
        if first is None:
            print(f"FAIL: fast_share never reached {args.reach}")
            ok = False
        elif ticks[first]["t"] > args.within + 1e-9:
            print(f"FAIL: fast_share reached {args.reach} only at t={ticks[first]['t']:.1f}s "
                  f"(limit {args.within}s)")
            ok = False
        else:
            dips = [t for t in ticks[first:] if t["fast_share"] < args.reach]
            if dips:
                print(f"FAIL: after reaching {args.reach} at t={ticks[first]['t']:.1f}s, "
                      f"fast_share fell to {min(t['fast_share'] for t in dips):.3f}")
                ok = False
            else:
                print(f"reached {args.reach} at t={ticks[first]['t']:.1f}s and stayed")
    if args.max_fast_bytes is not None and summary["all_fast_bytes"] > args.max_fast_bytes:
        print(f"FAIL: {summary['all_fast_bytes']} object bytes on fast nodes exceed the cap "
              f"{args.max_fast_bytes}")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
