#!/usr/bin/env python3
"""Judges a tierbench --json run from its own ground truth (never from objtier's counters).

  check_fast_share.py RUN.json --below 0.4
      the run's overall fast_share is below 0.4 (the baseline left the hot objects slow)
  check_fast_share.py RUN.json --reach 0.9 --within 10
      some tick at t <= 10 s (after the hot loop started) has fast_share >= 0.9, and every
      later tick, to the end of the run, stays >= 0.9
  --max-fast-bytes N  additionally: at the end, at most N bytes of the objects are on fast nodes

With --after-event NAME (tierbench's `phase` event: the hot set moved to other objects), only
the ticks after that event count, and times are measured from it:
  --below X         the fast_share of all accesses after the event is below X
  --reach X --within S
                    some tick at most S seconds after the event reaches X, and every later tick
                    stays >= X (the time printed is the recovery time)
  --before-reach X  the last tick before the event has fast_share >= X (the old hot set was in
                    the fast tier when the hot set moved)
  --event-fast-below X
                    at the event, less than X of the new hot set's bytes were on fast nodes (it
                    started slow, so reaching --reach took migrations)
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
    ap.add_argument("--after-event")
    ap.add_argument("--before-reach", type=float)
    ap.add_argument("--event-fast-below", type=float)
    args = ap.parse_args()
    if (args.before_reach is not None or args.event_fast_below is not None) and not args.after_event:
        ap.error("--before-reach and --event-fast-below need --after-event")

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

    # Times are measured from `origin`; `judged` are the ticks that count.
    origin, judged, overall = 0.0, ticks, summary["fast_share"]
    if args.after_event:
        marker = next((e for e in events if e.get("event") == args.after_event), None)
        if marker is None:
            print(f"FAIL: {args.run} has no {args.after_event} event")
            return 1
        origin = marker["t"]
        before = [t for t in ticks if t["t"] <= origin]
        judged = [t for t in ticks if t["t"] > origin]
        if not judged:
            print(f"FAIL: no tick after the {args.after_event} event at t={origin:.1f}s")
            return 1
        accesses = sum(t["accesses"] for t in judged)
        overall = sum(t["accesses"] * t["fast_share"] for t in judged) / max(1, accesses)
        setup = next((e for e in events if e.get("event") == "setup"), {})
        hot_bytes = setup.get("hot", 0) * setup.get("size_bytes", 0)
        event_share = marker.get("hot_fast_bytes", 0) / hot_bytes if hot_bytes else None
        timeline = " ".join(f"+{t['t'] - origin:.0f}s:{t['fast_share']:.2f}" for t in judged)
        print(f"{args.after_event} event at t={origin:.1f}s "
              f"(new hot set {'n/a' if event_share is None else f'{event_share:.2f}'} on fast "
              f"nodes then); after it: {timeline}; overall {overall:.3f}")
        if args.before_reach is not None:
            if not before or before[-1]["fast_share"] < args.before_reach:
                last = f"{before[-1]['fast_share']:.3f}" if before else "no tick"
                print(f"FAIL: before the {args.after_event} event fast_share was {last}, "
                      f"not >= {args.before_reach}: the old hot set had not settled")
                ok = False
        if args.event_fast_below is not None:
            if event_share is None or not event_share < args.event_fast_below:
                shown = "n/a" if event_share is None else f"{event_share:.3f}"
                print(f"FAIL: at the {args.after_event} event {shown} of the new hot set "
                      f"was on fast nodes, not below {args.event_fast_below}")
                ok = False

    if args.below is not None and not overall < args.below:
        print(f"FAIL: overall fast_share {overall:.3f} is not below {args.below}")
        ok = False
    since = lambda t: f" ({t - origin:.1f}s after t={origin:.1f}s)" if args.after_event else ""
    if args.reach is not None:
        first = next((i for i, t in enumerate(judged) if t["fast_share"] >= args.reach), None)
        if first is None:
            print(f"FAIL: fast_share never reached {args.reach}")
            ok = False
        elif judged[first]["t"] - origin > args.within + 1e-9:
            print(f"FAIL: fast_share reached {args.reach} only at t={judged[first]['t']:.1f}s"
                  f"{since(judged[first]['t'])} (limit {args.within}s)")
            ok = False
        else:
            dips = [t for t in judged[first:] if t["fast_share"] < args.reach]
            if dips:
                print(f"FAIL: after reaching {args.reach} at t={judged[first]['t']:.1f}s"
                      f"{since(judged[first]['t'])}, "
                      f"fast_share fell to {min(t['fast_share'] for t in dips):.3f}")
                ok = False
            else:
                print(f"reached {args.reach} at t={judged[first]['t']:.1f}s"
                      f"{since(judged[first]['t'])} and stayed")
    if args.max_fast_bytes is not None and summary["all_fast_bytes"] > args.max_fast_bytes:
        print(f"FAIL: {summary['all_fast_bytes']} object bytes on fast nodes exceed the cap "
              f"{args.max_fast_bytes}")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
