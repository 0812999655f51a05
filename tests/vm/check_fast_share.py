#!/usr/bin/env python3
"""Judges a tierbench --json run from its own ground truth (never from objtier's counters).

  check_fast_share.py RUN.json --below 0.4
      the run's overall fast_share is below 0.4 (the baseline left the hot objects slow)
  check_fast_share.py RUN.json --reach 0.9 --within 10
      some tick at t <= 10 s (after the hot loop started) has fast_share >= 0.9, and every
      later tick, to the end of the run, stays >= 0.9
  --max-fast-bytes N  additionally: at the end, at most N bytes of the objects are on fast nodes
  --stalls FILE       the times the guest's vCPUs stood still (tests/vm/tlb-flusher
                      records them): a --within deadline is extended by the stalled seconds
                      between the start of its window and the tick that reached (the daemon
                      and the workload both stood still then; tierbench's clock did not)

Exit status: 0 pass; 1 fail; 3 the reach check alone failed, and the guest stood still at least
STALLED_SECONDS of its window (the run says nothing about objtier: the caller may run it again).

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

# Stalls this long within a failed reach check's window make its verdict "stalled" (exit 3).
STALLED_SECONDS = 5.0


def read_stalls(path):
    """[(start, end)] in seconds since the Unix epoch, from `CPU END DURATION` lines."""
    stalls = []
    try:
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) == 3:
                    end, duration = float(fields[1]), float(fields[2])
                    stalls.append((end - duration, end))
    except FileNotFoundError:
        pass
    return stalls


def stalled_seconds(stalls, start, end):
    """How long, within [start, end], at least one vCPU stood still."""
    total, reach = 0.0, start
    for s, e in sorted(stalls):
        s, e = max(s, reach), min(e, end)
        if e > s:
            total += e - s
            reach = e
    return total


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
    ap.add_argument("--stalls")
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
    failures = 0
    reach_stalled = False  # the reach check failed with the guest stalled in its window

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
                failures += 1
        if args.event_fast_below is not None:
            if event_share is None or not event_share < args.event_fast_below:
                shown = "n/a" if event_share is None else f"{event_share:.3f}"
                print(f"FAIL: at the {args.after_event} event {shown} of the new hot set "
                      f"was on fast nodes, not below {args.event_fast_below}")
                failures += 1

    if args.below is not None and not overall < args.below:
        print(f"FAIL: overall fast_share {overall:.3f} is not below {args.below}")
        failures += 1
    since = lambda t: f" ({t - origin:.1f}s after t={origin:.1f}s)" if args.after_event else ""
    if args.reach is not None:
        first = next((i for i, t in enumerate(judged) if t["fast_share"] >= args.reach), None)
        # The window's start on the wall clock: the event's line, or the loop's start (the
        # first tick's line less its loop time).
        if args.after_event:
            window_start = marker.get("unix_time")
        else:
            window_start = ticks[0].get("unix_time", 0) - ticks[0]["t"]
        stalls = read_stalls(args.stalls) if args.stalls else []
        def stood_still(until):
            if not stalls or window_start is None or until is None:
                return 0.0
            return stalled_seconds(stalls, window_start, until)
        limit = args.within
        if first is not None:
            stalled = stood_still(judged[first].get("unix_time"))
            limit += stalled
        else:
            stalled = stood_still(judged[-1].get("unix_time"))
        shown = f"{args.within}s + {stalled:.1f}s the guest stood still" if stalled else f"{args.within}s"
        if first is None:
            still = f" (the guest stood still {stalled:.1f}s of the run)" if stalled else ""
            print(f"FAIL: fast_share never reached {args.reach}{still}")
            failures += 1
            reach_stalled = stalled >= STALLED_SECONDS
        elif judged[first]["t"] - origin > limit + 1e-9:
            print(f"FAIL: fast_share reached {args.reach} only at t={judged[first]['t']:.1f}s"
                  f"{since(judged[first]['t'])} (limit {shown})")
            failures += 1
            reach_stalled = stalled >= STALLED_SECONDS
        else:
            dips = [t for t in judged[first:] if t["fast_share"] < args.reach]
            if dips:
                print(f"FAIL: after reaching {args.reach} at t={judged[first]['t']:.1f}s"
                      f"{since(judged[first]['t'])}, "
                      f"fast_share fell to {min(t['fast_share'] for t in dips):.3f}")
                failures += 1
            else:
                print(f"reached {args.reach} at t={judged[first]['t']:.1f}s"
                      f"{since(judged[first]['t'])} and stayed (limit {shown})")
    if args.max_fast_bytes is not None and summary["all_fast_bytes"] > args.max_fast_bytes:
        print(f"FAIL: {summary['all_fast_bytes']} object bytes on fast nodes exceed the cap "
              f"{args.max_fast_bytes}")
        failures += 1
    if failures == 0:
        return 0
    if failures == 1 and reach_stalled:
        print(f"(a vCPU stood still for {STALLED_SECONDS:.0f} s or more of this window: the "
              "deadline measured the stalls; the scenario may run once more)")
        return 3
    return 1


if __name__ == "__main__":
    sys.exit(main())
