#!/usr/bin/env python3
"""Judges the low-priority tierbench of the `priorities` scenario (its JSON lines are prefixed
with the wall-clock time they were printed).

  priorities.py settled LOW.json            exit 0 once its last tick has fast_share >= 0.8
  priorities.py back LOW.json HIGH_EXIT_TIME [SECONDS]
      its fast_share rose above 0.8 within SECONDS (default 10) after the high-priority
      program exited
"""
import json
import sys


def ticks(path):
    out = []
    for line in open(path):
        stamp, _, rest = line.partition(" ")
        if '"tick"' in rest:
            out.append((float(stamp), json.loads(rest)))
    return out


def main():
    mode, path = sys.argv[1], sys.argv[2]
    rows = ticks(path)
    if mode == "settled":
        return 0 if len(rows) >= 3 and rows[-1][1]["fast_share"] >= 0.8 else 1
    high_exit = float(sys.argv[3])
    limit = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
    print("low-priority fast_share per second ('|' = high-priority program exits):",
          " ".join(("| " if i and rows[i - 1][0] < high_exit <= t else "") + f"{e['fast_share']:.2f}"
                   for i, (t, e) in enumerate(rows)))
    after = [(t - high_exit, e["fast_share"]) for t, e in rows if t >= high_exit]
    back = next((dt for dt, share in after if share > 0.8), None)
    if back is None or back > limit:
        print(f"FAIL: the low-priority program did not get above 0.8 within {limit:.0f} s after "
              f"the high-priority one exited (first time: {back})")
        return 1
    print(f"low-priority program back above 0.8 {back:.1f} s after the high-priority one exited")
    return 0


if __name__ == "__main__":
    sys.exit(main())
