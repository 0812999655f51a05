"""Turns bench/alloc/run's raw results into tables of medians and ratios, as text and markdown.

Input: a TSV of `workload, configuration, seconds, peak RSS KiB` per run, or
`workload, configuration, FAILED, reason`. Medians are taken per workload and configuration; the
summary compares objtier with glibc and mimalloc, and objtier+daemon with objtier, by geometric
mean over workloads (ratios multiply, so their mean is geometric) and by worst case, against the
targets of issue 3.

Every ratio also gets a 90 % interval, so that a reader can tell a ratio from the noise of a
two-CPU machine: runs are interleaved round-robin, so the i-th run of every configuration of a
workload shares a round (and its background load) with the i-th run of every other, and the
rounds are resampled with replacement (a bootstrap, with a fixed seed: the same results give the
same report), the ratio of medians computed for each resample, and its 5th and 95th percentiles
taken. A verdict that is not met says on how many workloads the whole interval is past the limit
("beyond noise"); the others could be noise.
"""
import argparse
import math
import random
import statistics

# Resamples per interval, and the seed that makes the report a function of the results.
RESAMPLES = 2000
SEED = 0x0B71E4
LEVEL = 0.90

TARGETS = [
    # (name, numerator, denominator, metric, limit on every workload or None, limit on the mean)
    ("objtier time vs glibc", "objtier", "glibc", "seconds", 1.00, None),
    ("objtier time vs mimalloc", "objtier", "mimalloc", "seconds", 1.05, None),
    ("objtier+daemon time vs objtier", "objtier+daemon", "objtier", "seconds", None, 1.02),
    ("objtier peak RSS vs mimalloc", "objtier", "mimalloc", "rss", 1.05, None),
    # Not a target of the issue: libobjtier against mimalloc giving the same objects pages of
    # their own (paged-mimalloc.c), which shows how much of the ratio to mimalloc is the layout.
    ("objtier time vs mimalloc-paged", "objtier", "mimalloc-paged", "seconds", None, None),
    ("objtier peak RSS vs mimalloc-paged", "objtier", "mimalloc-paged", "rss", None, None),
    # Not a target either: the daemon on runs that start knowing nothing of the program (the
    # warm start off), where objtier+daemon's store knows the runs before.
    ("objtier+daemon-cold time vs objtier", "objtier+daemon-cold", "objtier", "seconds", None, None),
]
TARGET_TEXT = {
    "objtier time vs glibc": "<= 1.00 on every workload",
    "objtier time vs mimalloc": "<= 1.05 on every workload",
    "objtier+daemon time vs objtier": "<= 1.02 on average",
    "objtier peak RSS vs mimalloc": "<= 1.05 on every workload",
    "objtier time vs mimalloc-paged": "none (the layout's price apart)",
    "objtier peak RSS vs mimalloc-paged": "none (the layout's price apart)",
    "objtier+daemon-cold time vs objtier": "none (every run a first run)",
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", required=True)
    parser.add_argument("--workloads", required=True)
    parser.add_argument("--configs", required=True)
    parser.add_argument("--runs", required=True, type=int)
    parser.add_argument("--descriptions", required=True)
    parser.add_argument("--header", required=True)
    parser.add_argument("--out")
    args = parser.parse_args()
    workloads = args.workloads.split(",")
    configs = args.configs.split(",")
    with open(args.descriptions) as f:
        descriptions = dict(line.rstrip("\n").split("\t", 1) for line in f if "\t" in line)
    with open(args.header) as f:
        header = [line.rstrip("\n") for line in f if line.strip()]

    seconds, rss, failed = {}, {}, {}
    with open(args.results) as f:
        for line in f:
            workload, config, a, b = line.rstrip("\n").split("\t", 3)
            if a == "FAILED":
                failed[(workload, config)] = b
            else:
                seconds.setdefault((workload, config), []).append(float(a))
                rss.setdefault((workload, config), []).append(int(b) / 1024)

    median = {}
    for key, values in seconds.items():
        if key not in failed:
            median[key] = {
                "seconds": statistics.median(values),
                "rss": statistics.median(rss[key]),
                "spread": (max(values) - min(values)) / statistics.median(values),
                "runs": len(values),
            }

    def ratio(workload, a, b, metric):
        if (workload, a) in median and (workload, b) in median and median[(workload, b)][metric]:
            return median[(workload, a)][metric] / median[(workload, b)][metric]
        return None

    def fmt(value, digits=2):
        return "-" if value is None else f"{value:.{digits}f}"

    def values(workload, config, metric):
        if (workload, config) not in median:
            return None
        return (seconds if metric == "seconds" else rss)[(workload, config)]

    def pairs(workload, a, b, metric):
        """(numerator, denominator) per round, for the rounds both configurations ran."""
        va, vb = values(workload, a, metric), values(workload, b, metric)
        if not va or not vb:
            return None
        return list(zip(va, vb))

    columns = ["configuration", "median s", "x glibc", "x mimalloc", "x mimalloc-paged", "spread",
               "peak RSS MiB", "RSS x mimalloc"]
    tables = []
    for workload in workloads:
        rows = []
        for config in configs:
            key = (workload, config)
            if key in failed:
                rows.append([config, "FAILED", failed[key], "", "", "", "", ""])
                continue
            if key not in median:
                rows.append([config, "no runs", "", "", "", "", "", ""])
                continue
            m = median[key]
            rows.append([
                config,
                f"{m['seconds']:.3f}",
                fmt(ratio(workload, config, "glibc", "seconds")),
                fmt(ratio(workload, config, "mimalloc", "seconds")),
                fmt(ratio(workload, config, "mimalloc-paged", "seconds")),
                f"{100 * m['spread']:.0f} %",
                f"{m['rss']:.1f}",
                fmt(ratio(workload, config, "mimalloc", "rss")),
            ])
        tables.append((workload, rows))

    summary = []
    intervals = {}  # (comparison, workload) -> (low, high)
    for name, a, b, metric, every_limit, mean_limit in TARGETS:
        by_workload = {w: pairs(w, a, b, metric) for w in workloads}
        by_workload = {w: p for w, p in by_workload.items() if p}
        for w, p in by_workload.items():
            intervals[(name, w)] = ratio_interval(p, random.Random(SEED))
        mean_interval = geomean_interval(list(by_workload.values()), random.Random(SEED))
        ratios = [(w, ratio(w, a, b, metric)) for w in workloads]
        ratios = [(w, r) for w, r in ratios if r is not None]
        if not ratios:
            summary.append([name, "-", "-", "-", "-", TARGET_TEXT[name], "no data"])
            continue
        geomean = math.exp(sum(math.log(r) for _, r in ratios) / len(ratios))
        worst_workload, worst = max(ratios, key=lambda item: item[1])
        verdict = verdict_of(ratios, geomean, mean_interval, every_limit, mean_limit,
                             {w: intervals.get((name, w)) for w, _ in ratios})
        missing = [w for w in workloads if w not in [x for x, _ in ratios]]
        if missing:
            verdict += f" (no ratio for {', '.join(missing)})"
        summary.append([name, f"{geomean:.3f}", format_interval(mean_interval, 3), f"{worst:.2f}",
                        worst_workload, TARGET_TEXT[name], verdict])
    summary_columns = ["comparison", "geomean", "90 % interval", "worst", "worst on", "target",
                       "verdict"]

    # The targets' ratios per workload, each with its interval.
    target_names = [t[0] for t in TARGETS if t[4] is not None or t[5] is not None]
    interval_columns = ["workload"] + target_names
    interval_rows = []
    for workload in workloads:
        row = [workload]
        for name, a, b, metric, _, _ in TARGETS:
            if name not in target_names:
                continue
            r = ratio(workload, a, b, metric)
            row.append("-" if r is None else
                       f"{r:.2f} ({format_interval(intervals.get((name, workload)))})")
        interval_rows.append(row)

    # Plain text for the terminal.
    text = []
    for line in header:
        text.append(line)
    text.append(f"{args.runs} runs per configuration, interleaved; medians; spread = (max - min) / median")
    for workload, rows in tables:
        text.append("")
        text.append(f"{workload}: {descriptions.get(workload, '')}")
        text.extend(aligned(columns, rows))
    text.append("")
    text.append("the targets' ratios per workload, with 90 % intervals (rounds resampled):")
    text.extend(aligned(interval_columns, interval_rows))
    text.append("")
    text.append("summary (ratios of medians; geomean over workloads):")
    text.extend(aligned(summary_columns, summary))
    print("\n".join(text))

    if args.out:
        md = ["# objtier allocator benchmark", ""]
        md += [f"- {line}" for line in header]
        md.append(f"- {args.runs} runs per configuration, interleaved round-robin; "
                  "medians; spread = (max - min) / median of the times")
        for workload, rows in tables:
            md += ["", f"## {workload}", "", descriptions.get(workload, ""), ""]
            md += markdown(columns, rows)
        md += ["", "## The targets per workload", "",
               "Ratios of medians, with 90 % intervals from resampling the rounds (each round "
               "ran every configuration once, so its runs share the background load).", ""]
        md += markdown(interval_columns, interval_rows)
        md += ["", "## Summary", "",
               "Ratios of medians; geometric mean over workloads, with its 90 % interval. "
               "\"Beyond noise\": the whole interval is past the limit.", ""]
        md += markdown(summary_columns, summary)
        with open(args.out, "w") as f:
            f.write("\n".join(md) + "\n")
        print(f"\nwrote {args.out}")


def percentile(sorted_values, fraction):
    """The value at `fraction` of a sorted list, interpolating between neighbours."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    position = fraction * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def resampled_ratio(pairs, rng):
    """The ratio of medians of one resample (with replacement) of the rounds in `pairs`."""
    sample = [pairs[rng.randrange(len(pairs))] for _ in pairs]
    denominator = statistics.median(b for _, b in sample)
    return statistics.median(a for a, _ in sample) / denominator if denominator else None


def interval_of(statistic, rng):
    """The central LEVEL interval of `statistic(rng)` over RESAMPLES draws; None without data."""
    draws = sorted(v for v in (statistic(rng) for _ in range(RESAMPLES)) if v is not None)
    if not draws:
        return None
    tail = (1 - LEVEL) / 2
    return percentile(draws, tail), percentile(draws, 1 - tail)


def ratio_interval(pairs, rng):
    """LEVEL interval of the ratio of medians of one workload's (numerator, denominator) rounds."""
    return interval_of(lambda r: resampled_ratio(pairs, r), rng)


def geomean_interval(pairs_per_workload, rng):
    """LEVEL interval of the geometric mean over workloads of their ratios of medians, the rounds
    of each workload resampled on their own."""
    if not pairs_per_workload:
        return None

    def draw(r):
        ratios = [resampled_ratio(p, r) for p in pairs_per_workload]
        if any(x is None or x <= 0 for x in ratios):
            return None
        return math.exp(sum(math.log(x) for x in ratios) / len(ratios))

    return interval_of(draw, rng)


def verdict_of(ratios, geomean, mean_interval, every_limit, mean_limit, intervals):
    """"met", "not met ..." with how much of it is beyond noise, or "for reading"."""
    eps = 1e-9
    if every_limit is None and mean_limit is None:
        return "for reading"
    if every_limit is not None:
        over = [w for w, r in ratios if r > every_limit + eps]
        if not over:
            return "met"
        beyond = [w for w in over if intervals.get(w) and intervals[w][0] > every_limit + eps]
        noise = f"beyond noise on {', '.join(beyond)}" if beyond else "none beyond noise"
        return f"not met on {len(over)} of {len(ratios)} ({noise})"
    if geomean <= mean_limit + eps:
        return "met"
    if mean_interval and mean_interval[0] > mean_limit + eps:
        return "not met (beyond noise)"
    return "not met (within noise)"


def format_interval(interval, digits=2):
    return "-" if interval is None else f"{interval[0]:.{digits}f}-{interval[1]:.{digits}f}"


def aligned(columns, rows):
    widths = [max(len(str(r[i])) for r in [columns] + rows) for i in range(len(columns))]
    lines = ["  " + "  ".join(str(c).ljust(w) for c, w in zip(columns, widths))]
    for row in rows:
        lines.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    return lines


def markdown(columns, rows):
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return lines


if __name__ == "__main__":
    main()
