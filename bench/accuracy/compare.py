#!/usr/bin/python3
"""bench/accuracy/compare.py RESULTS: the accuracy table from RESULTS/WORKLOAD/{emulate,damon,
proc}.json (bench/accuracy/run), written to RESULTS/accuracy.md and RESULTS/accuracy.json.

Per workload and online source:
- rho: Spearman's rank correlation between the source's site heat (accesses per byte of peak
  live bytes, the hotset's ranking) and the emulated profile's (modeled cache misses per byte),
  over the sites either saw (a site one of them did not see has heat 0);
- at 12.5, 25 and 50 % of the emulated profile's peak footprint: the share of the emulated
  misses on tracked memory that the sites the source would put in the fast tier hold (hotset by
  the source's heat, whole sites by peak live bytes until the capacity is crossed, the crossing
  site in part), each site's budget judged against its true size (the emulated profile's peak
  live bytes), beside the share of emulate's own choice (a ranking by exact misses per byte).
"""

import json
import math
import sys
from pathlib import Path

CAPACITIES = (0.125, 0.25, 0.5)
SOURCES = ("damon", "proc")


def sites(profile):
    out = {}
    for s in profile["sites"]:
        if s["kind"] == "unknown" or s["peak_live_bytes"] <= 0:
            continue
        key = (s["kind"], tuple(s["frames"]))
        a, b = out.get(key, (0.0, 0))
        out[key] = (a + s["accesses"], max(b, s["peak_live_bytes"]))
    return out


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x, y):
    if len(x) < 3:
        return None
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy) if vx and vy else None


def hotset(chooser, capacity):
    """{key: bytes of the fast tier} for hotset over `chooser`'s sites, sized as it saw them
    (what `objtier advise` would budget)."""
    order = sorted(((a / b, key, b) for key, (a, b) in chooser.items() if a > 0),
                   key=lambda t: (-t[0], t[1]))
    left, budgets = capacity, {}
    for _, key, size in order:
        if left <= 0:
            break
        budgets[key] = min(size, left)
        left -= size
    return budgets


def share(budgets, exact):
    """The share of the exact misses the budgets hold: a site's budget over its true peak
    bytes, of its misses (spread evenly over its bytes)."""
    total = sum(a for a, _ in exact.values())
    held = sum(exact[k][0] * min(1.0, b / exact[k][1]) for k, b in budgets.items() if k in exact)
    return held / total if total else None


def compare(workload_dir):
    emulate = json.loads((workload_dir / "emulate.json").read_text())
    exact = sites(emulate)
    footprint = emulate["peak_footprint_bytes"]
    row = {"workload": workload_dir.name, "sites": len(exact),
           "emulate": {"share": [share(hotset(exact, c * footprint), exact) for c in CAPACITIES]}}
    for source in SOURCES:
        path = workload_dir / f"{source}.json"
        if not path.exists():
            continue
        sampled = sites(json.loads(path.read_text()))
        keys = sorted(set(exact) | set(sampled))
        heat = lambda d, k: d[k][0] / d[k][1] if k in d else 0.0
        row[source] = {
            "rho": spearman([heat(sampled, k) for k in keys], [heat(exact, k) for k in keys]),
            "share": [share(hotset(sampled, c * footprint), exact) for c in CAPACITIES],
            "sites_seen": sum(1 for k in exact if k in sampled),
        }
    return row


def fmt(v, pct=False):
    if v is None:
        return "-"
    return f"{100 * v:.0f} %" if pct else f"{v:.2f}"


def main():
    results = Path(sys.argv[1])
    rows = [compare(d) for d in sorted(results.iterdir()) if (d / "emulate.json").exists()]
    (results / "accuracy.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = ["| workload | sites | source | rho | 12.5 % | 25 % | 50 % |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        for source in ("emulate",) + SOURCES:
            if source not in r:
                continue
            s = r[source]
            lines.append(f"| {r['workload']} | {r['sites']} | {source} | {fmt(s.get('rho')) if source != 'emulate' else '1'} | "
                         + " | ".join(fmt(v, True) for v in s["share"]) + " |")
    for source in SOURCES:
        got = [r[source] for r in rows if source in r]
        if not got:
            continue
        rhos = [g["rho"] for g in got if g["rho"] is not None]
        means = [sum(g["share"][i] for g in got if g["share"][i] is not None) / len(got) for i in range(len(CAPACITIES))]
        ideal = [sum(r["emulate"]["share"][i] or 0 for r in rows if source in r) / len(got) for i in range(len(CAPACITIES))]
        lines.append(f"| mean of {len(got)} | | {source} | {fmt(sum(rhos) / len(rhos) if rhos else None)} | "
                     + " | ".join(f"{fmt(m, True)} ({fmt(i, True)})" for m, i in zip(means, ideal)) + " |")
    (results / "accuracy.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
