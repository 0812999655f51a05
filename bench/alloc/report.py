"""Turns bench/alloc/run's raw results into tables of medians and ratios, as text and markdown.

Input: a TSV of `workload, configuration, seconds, peak RSS KiB` per run, or
`workload, configuration, FAILED, reason`. Medians are taken per workload and configuration; the
summary compares objtier with glibc and mimalloc, and objtier+daemon with objtier, by geometric
mean over workloads (ratios multiply, so their mean is geometric) and by worst case, against the
targets of issue 3.
"""
import argparse
import math
import statistics

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
]
TARGET_TEXT = {
    "objtier time vs glibc": "<= 1.00 on every workload",
    "objtier time vs mimalloc": "<= 1.05 on every workload",
    "objtier+daemon time vs objtier": "<= 1.02 on average",
    "objtier peak RSS vs mimalloc": "<= 1.05 on every workload",
    "objtier time vs mimalloc-paged": "none (the layout's price apart)",
    "objtier peak RSS vs mimalloc-paged": "none (the layout's price apart)",
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
    for name, a, b, metric, every_limit, mean_limit in TARGETS:
        ratios = [(w, ratio(w, a, b, metric)) for w in workloads]
        ratios = [(w, r) for w, r in ratios if r is not None]
        if not ratios:
            summary.append([name, "-", "-", "-", TARGET_TEXT[name], "no data"])
            continue
        geomean = math.exp(sum(math.log(r) for _, r in ratios) / len(ratios))
        worst_workload, worst = max(ratios, key=lambda item: item[1])
        if every_limit is None and mean_limit is None:
            verdict = "for reading"
        elif every_limit is not None:
            over = [w for w, r in ratios if r > every_limit + 1e-9]
            verdict = "met" if not over else f"not met on {len(over)} of {len(ratios)}"
        else:
            verdict = "met" if geomean <= mean_limit + 1e-9 else "not met"
        missing = [w for w in workloads if w not in [x for x, _ in ratios]]
        if missing:
            verdict += f" (no ratio for {', '.join(missing)})"
        summary.append([name, f"{geomean:.3f}", f"{worst:.2f}", worst_workload,
                        TARGET_TEXT[name], verdict])
    summary_columns = ["comparison", "geomean", "worst", "worst on", "target", "verdict"]

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
        md += ["", "## Summary", "", "Ratios of medians; geometric mean over workloads.", ""]
        md += markdown(summary_columns, summary)
        with open(args.out, "w") as f:
            f.write("\n".join(md) + "\n")
        print(f"\nwrote {args.out}")


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
