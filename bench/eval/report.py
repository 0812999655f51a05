#!/usr/bin/env python3
"""Summarizes an evaluation results folder (bench/eval) as Markdown and plots.

Usage:
  report.py RESULTS_DIR            reads RESULTS_DIR/runs.jsonl (and meta.json if present), writes
                                   RESULTS_DIR/summary.md and the plots beside it
  report.py --header               prints the header of the per-run table
  report.py --row RUN_JSON_FILE    prints one row of that table for one run ("-" reads stdin)

Each line of runs.jsonl is one run: a workload under one tiering configuration at one fast-tier
capacity (a share of the workload's peak footprint), with the oracle's per-node access counts for
the measured window. The main number is the modeled memory time (node accesses x that node's HMAT
latency), compared with first-touch at the same capacity: first-touch never moves a page, so the
ratio says what the tiering bought. Lower is better.

A cell run more than once (`bench/eval/run --repeat N`, or --resume into a folder that has it)
shows the mean of its successful runs and, in parentheses, the lowest and the highest: the ratio
of each run is taken against the mean of first-touch's runs at that capacity.

Standard library only, plus matplotlib (Agg backend) for the plots; without matplotlib the summary
is still written and says why the plots are missing.
"""
import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field

BASELINE = "first-touch"
# Configurations that are not objtier come first, in this order, so that every table starts with
# the baseline; any other configuration follows in the order it first appears in runs.jsonl.
KNOWN_ORDER = ["first-touch", "mimalloc", "libobjtier", "numactl-preferred", "numab-tiering", "damos"]
DEFAULT_TIMELINE_CAPACITY = 0.25
RUNS_FILE = "runs.jsonl"
META_FILE = "meta.json"
SUMMARY_FILE = "summary.md"
META_KEYS = ["started", "command", "git", "icount", "kernel", "qemu"]


# ---------------------------------------------------------------------------------------------
# Reading runs


@dataclass
class Run:
    """One run, with the numbers the report uses; None where the JSON did not have them."""

    workload: str
    config: str
    capacity: float
    ok: bool
    error: str = ""
    fast_share: float | None = None
    modeled_s: float | None = None
    migrated_gib: float | None = None
    wall_s: float | None = None
    footprint_mib: float | None = None
    fast_node_mib: float | None = None
    timeline: list = field(default_factory=list)


def number(value):
    """value as a float, or None when it is missing or not a number (bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if math.isnan(value) or math.isinf(value):
        return None
    return float(value)


def fast_share_of(oracle):
    """The oracle's fast_share, or, when it is missing, the fast nodes' share of node accesses."""
    share = number(oracle.get("fast_share"))
    if share is not None:
        return share
    fast = 0.0
    total = 0.0
    for node in oracle.get("nodes") or []:
        accesses = (number(node.get("loads")) or 0.0) + (number(node.get("stores")) or 0.0)
        total += accesses
        if node.get("fast"):
            fast += accesses
    if total == 0:
        return None
    return fast / total


def modeled_seconds_of(oracle):
    """The oracle's modeled_memory_s, or, when it is missing, sum of accesses x latency per node."""
    seconds = number(oracle.get("modeled_memory_s"))
    if seconds is not None:
        return seconds
    nodes = oracle.get("nodes") or []
    if not nodes:
        return None
    total_ns = 0.0
    for node in nodes:
        latency = number(node.get("latency_ns"))
        if latency is None:
            return None
        accesses = (number(node.get("loads")) or 0.0) + (number(node.get("stores")) or 0.0)
        total_ns += accesses * latency
    return total_ns * 1e-9


def parse_timeline(entries):
    """(t, fast_share) points of a run's timeline, skipping entries without both numbers."""
    points = []
    if not isinstance(entries, list):
        return points
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        t = number(entry.get("t"))
        share = number(entry.get("fast_share"))
        if t is not None and share is not None:
            points.append((t, share))
    return points


def to_run(obj):
    """A Run from one JSON object; ValueError when it cannot be placed in the matrix."""
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    workload = obj.get("workload")
    config = obj.get("config")
    capacity = number(obj.get("capacity"))
    if not isinstance(workload, str) or not workload:
        raise ValueError("no workload")
    if not isinstance(config, str) or not config:
        raise ValueError("no config")
    if capacity is None or capacity <= 0:
        raise ValueError("no capacity")
    oracle = obj.get("oracle")
    if not isinstance(oracle, dict):
        oracle = {}
    status = obj.get("status", "ok")
    error = obj.get("error") or ""
    return Run(
        workload=workload,
        config=config,
        # Rounded so that the same capacity written two ways (0.25, 0.25000000001) is one column.
        capacity=round(capacity, 6),
        ok=(status == "ok"),
        error=str(error) if status == "ok" else str(error or f"status {status}"),
        fast_share=fast_share_of(oracle),
        modeled_s=modeled_seconds_of(oracle),
        migrated_gib=number(obj.get("migrated_gib")),
        wall_s=number(obj.get("wall_s")),
        footprint_mib=number(obj.get("footprint_mib")),
        fast_node_mib=number(obj.get("fast_node_mib")),
        timeline=parse_timeline(obj.get("timeline")),
    )


def read_runs(path):
    """The runs of a runs.jsonl, in file order, and warnings about lines that were skipped.

    A line that is not JSON is skipped rather than fatal: the last line can be cut short when a
    harness is interrupted while writing it, and the rest of the results are still worth a report.
    """
    runs = []
    warnings = []
    with open(path, encoding="utf-8") as f:
        for number_, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                runs.append(to_run(json.loads(line)))
            except (ValueError, TypeError) as e:
                warnings.append(f"{os.path.basename(path)} line {number_} skipped: {e}")
    return runs, warnings


def read_meta(path):
    """meta.json as a dict, or {} when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(meta, dict):
        return {}
    return meta


# ---------------------------------------------------------------------------------------------
# The matrix


@dataclass
class Matrix:
    """The runs of each (workload, config, capacity) cell, and the axes in report order.

    `cells` holds each cell's latest run (what a failed cell reports), `runs` all of them in
    file order.
    """

    cells: dict
    runs: dict
    workloads: list
    configs: list
    capacities: list
    repeated_cells: int


def config_order(configs_in_file_order):
    """Baselines in KNOWN_ORDER, then the others (the objtier policies) as they first appeared."""
    known = [c for c in KNOWN_ORDER if c in configs_in_file_order]
    others = [c for c in configs_in_file_order if c not in KNOWN_ORDER]
    return known + others


def build_matrix(runs):
    """Places runs in their cells, the latest of each in `cells`."""
    all_runs = {}
    workloads = []
    configs = []
    for run in runs:
        all_runs.setdefault((run.workload, run.config, run.capacity), []).append(run)
        if run.workload not in workloads:
            workloads.append(run.workload)
        if run.config not in configs:
            configs.append(run.config)
    cells = {key: cell_runs[-1] for key, cell_runs in all_runs.items()}
    repeated = sum(len(cell_runs) > 1 for cell_runs in all_runs.values())
    capacities = sorted({run.capacity for run in runs})
    return Matrix(cells, all_runs, workloads, config_order(configs), capacities, repeated)


def ok_runs(matrix, workload, config, capacity):
    """The cell's successful runs, in file order."""
    return [run for run in matrix.runs.get((workload, config, capacity), []) if run.ok]


def ok_run(matrix, workload, config, capacity):
    """The cell's latest successful run, or None."""
    runs = ok_runs(matrix, workload, config, capacity)
    return runs[-1] if runs else None


def mean_of(values):
    """The mean of the values that are not None, or None if there are none."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def runs_mean(runs, metric):
    """The mean of one per-run number (a Run field) over `runs`."""
    return mean_of(getattr(run, metric) for run in runs)


def cell_mean(matrix, workload, config, capacity, metric):
    """The mean of one per-run number (a Run field) over the cell's successful runs."""
    return runs_mean(ok_runs(matrix, workload, config, capacity), metric)


def relative_times(matrix, workload, config, capacity):
    """Each successful run's modeled memory time relative to the mean of first-touch's at the
    same capacity; [] without a baseline."""
    base = cell_mean(matrix, workload, BASELINE, capacity, "modeled_s")
    if not base:
        return []
    return [run.modeled_s / base for run in ok_runs(matrix, workload, config, capacity)
            if run.modeled_s is not None]


def relative_time(matrix, workload, config, capacity):
    """Mean modeled memory time relative to first-touch at the same capacity, or None."""
    return mean_of(relative_times(matrix, workload, config, capacity))


def winners(matrix, workload, capacity):
    """The configs with the lowest modeled memory time at this capacity (all of them on a tie).

    Absolute modeled time (the mean over a cell's runs), not the ratio, so that a winner is known
    without a baseline too.
    """
    times = {}
    for config in matrix.configs:
        seconds = cell_mean(matrix, workload, config, capacity, "modeled_s")
        if seconds is not None:
            times[config] = seconds
    if not times:
        return set()
    best = min(times.values())
    return {config for config, seconds in times.items() if seconds == best}


def geomean(values):
    """Geometric mean of positive values (ratios multiply, so their mean is geometric)."""
    positive = [v for v in values if v > 0]
    if not positive:
        return None
    return math.exp(sum(math.log(v) for v in positive) / len(positive))


def relative_geomean(matrix, config, capacity):
    """(geomean over workloads of the relative time, workloads it covers, workloads possible).

    Workloads possible are those with a first-touch result at this capacity; a config that failed
    or did not run on some of them covers fewer, and the table says so.
    """
    ratios = []
    possible = 0
    for workload in matrix.workloads:
        if relative_time(matrix, workload, BASELINE, capacity) is None:
            continue
        possible += 1
        ratio = relative_time(matrix, workload, config, capacity)
        if ratio is not None:
            ratios.append(ratio)
    return geomean(ratios), len(ratios), possible


def win_count(matrix, config, capacity):
    """(workloads this config wins at this capacity, workloads with any result there).

    Ties count for each tied config.
    """
    count = 0
    contested = 0
    for workload in matrix.workloads:
        best = winners(matrix, workload, capacity)
        if best:
            contested += 1
        if config in best:
            count += 1
    return count, contested


def timeline_capacity(capacities, preferred=DEFAULT_TIMELINE_CAPACITY):
    """The capacity the timeline plots show: the preferred one, else the one closest to it."""
    if not capacities:
        return None
    return min(capacities, key=lambda c: (abs(c - preferred), c))


# ---------------------------------------------------------------------------------------------
# Formatting


def capacity_label(capacity):
    """0.125 -> '12.5 %'."""
    return f"{capacity_number(capacity)} %"


def capacity_number(capacity):
    """0.125 -> '12.5', 0.25 -> '25': the percentage as used in file names."""
    return f"{capacity * 100:g}"


def format_percent(share):
    return "-" if share is None else f"{share * 100:.1f} %"


def format_ratio(ratio):
    return "-" if ratio is None else f"{ratio:.2f}x"


def format_gib(gib):
    if gib is None:
        return "-"
    if gib != 0 and abs(gib) < 0.01:
        return f"{gib:.4f}"
    return f"{gib:.2f}"


def format_mib(mib):
    return "-" if mib is None else f"{mib:.0f} MiB"


def escape_cell(text):
    """Text that stays inside one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(header, rows):
    """A Markdown table; the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|")
    for row in rows:
        lines.append("| " + " | ".join(row) + " |")
    return lines


def bold(text):
    return f"**{text}**"


# ---------------------------------------------------------------------------------------------
# summary.md


class Notes:
    """Numbered notes (failed runs' errors), numbered across the whole summary.

    Plain '[n]' references and a list under each table rather than Markdown footnotes: the summary
    is pasted into docs/evaluation.md, where footnote labels could clash and would be moved to the
    end of that whole document.
    """

    def __init__(self):
        self.count = 0
        self.pending = []

    def add(self, text):
        self.count += 1
        self.pending.append(f"[{self.count}] {escape_cell(text)}")
        return f"[{self.count}]"

    def flush(self):
        """The notes added since the last flush, as Markdown lines."""
        lines = []
        if self.pending:
            lines.append("")
            for note in self.pending:
                lines.append(f"- {note}")
        self.pending = []
        return lines


def with_range(values, formatted_mean, fmt):
    """A cell's mean, followed by the lowest and highest run when there were several."""
    present = [v for v in values if v is not None]
    if len(present) < 2 or formatted_mean == "-":
        return formatted_mean
    return f"{formatted_mean} ({fmt(min(present))}-{fmt(max(present))})"


def workload_cells(matrix, workload, config, capacity, best, notes):
    """The three cells (fast share, relative time, migrated GiB) of one config at one capacity."""
    run = matrix.cells.get((workload, config, capacity))
    if run is None:
        return ["-", "-", "-"]
    runs = ok_runs(matrix, workload, config, capacity)
    if not runs:
        reference = notes.add(f"{workload}, {config}, {capacity_label(capacity)}: {run.error}")
        return [f"failed {reference}", "", ""]
    shares = [r.fast_share for r in runs]
    ratios = relative_times(matrix, workload, config, capacity)
    gibs = [r.migrated_gib for r in runs]
    cells = [
        with_range(shares, format_percent(mean_of(shares)), lambda v: f"{v * 100:.1f}"),
        with_range(ratios, format_ratio(mean_of(ratios)), lambda v: f"{v:.2f}"),
        with_range(gibs, format_gib(mean_of(gibs)), format_gib),
    ]
    if config in best:
        cells = [bold(cell) if cell != "-" else cell for cell in cells]
    return cells


def sizes_line(matrix, workload):
    """One line on the workload's footprint and the fast node it had at each capacity."""
    footprint = None
    fast_nodes = []
    for capacity in matrix.capacities:
        sizes = [run.fast_node_mib for (w, _, c), run in matrix.cells.items()
                 if w == workload and c == capacity and run.fast_node_mib is not None]
        footprints = [run.footprint_mib for (w, _, c), run in matrix.cells.items()
                      if w == workload and c == capacity and run.footprint_mib is not None]
        if footprints and footprint is None:
            footprint = footprints[0]
        if sizes:
            fast_nodes.append(f"{format_mib(max(sizes))} at {capacity_label(capacity)}")
    parts = []
    if footprint is not None:
        parts.append(f"Peak footprint {format_mib(footprint)}.")
    if fast_nodes:
        parts.append("Fast node (OS included): " + ", ".join(fast_nodes) + ".")
    return " ".join(parts)


def workload_capacities(matrix, workload):
    """The capacities this workload has runs at (a partial matrix leaves out whole columns)."""
    return [c for c in matrix.capacities
            if any((workload, config, c) in matrix.cells for config in matrix.configs)]


def workload_section(matrix, workload, notes, plots):
    """The per-workload table, its notes and links to its plots."""
    lines = [f"### {workload}", ""]
    sizes = sizes_line(matrix, workload)
    if sizes:
        lines += [sizes, ""]
    capacities = workload_capacities(matrix, workload)
    header = ["configuration"]
    for capacity in capacities:
        label = capacity_label(capacity)
        header += [f"{label} fast", f"{label} time", f"{label} GiB"]
    rows = []
    best_by_capacity = {c: winners(matrix, workload, c) for c in capacities}
    for config in matrix.configs:
        if not any((workload, config, c) in matrix.cells for c in capacities):
            continue
        row = [config]
        for capacity in capacities:
            row += workload_cells(matrix, workload, config, capacity,
                                  best_by_capacity[capacity], notes)
        rows.append(row)
    lines += table(header, rows)
    lines += notes.flush()
    links = [f"[{title}]({name})" for title, name in plots.get(workload, [])]
    if links:
        lines += ["", "Plots: " + ", ".join(links) + "."]
    lines.append("")
    return lines


def overall_section(matrix):
    """Per config: geomean of the relative time per capacity, and workloads won per capacity."""
    lines = ["## All workloads", ""]
    header = ["configuration"]
    header += [f"{capacity_label(c)} time" for c in matrix.capacities]
    header += [f"{capacity_label(c)} wins" for c in matrix.capacities]
    rows = []
    partial = False
    for config in matrix.configs:
        row = [config]
        for capacity in matrix.capacities:
            mean, covered, possible = relative_geomean(matrix, config, capacity)
            cell = format_ratio(mean)
            if mean is not None and covered < possible:
                cell += f" ({covered} of {possible})"
                partial = True
            row.append(cell)
        for capacity in matrix.capacities:
            won, contested = win_count(matrix, config, capacity)
            row.append(f"{won} of {contested}")
        rows.append(row)
    lines += table(header, rows)
    lines.append("")
    lines.append("time: geometric mean over workloads of the modeled memory time relative to "
                 f"{BASELINE} at the same capacity (lower is better). wins: workloads where the "
                 "configuration had the lowest modeled memory time (ties count for each).")
    if partial:
        lines.append("(k of n): over only the k workloads where the configuration has a result; "
                     "the others failed or did not run.")
    lines.append("")
    return lines


def meta_lines(meta):
    lines = []
    for key in META_KEYS:
        if meta.get(key) not in (None, ""):
            lines.append(f"- {key}: `{escape_cell(meta[key])}`")
    if lines:
        lines.append("")
    return lines


def render_summary(matrix, meta, plots, plot_note, warnings):
    """The whole summary.md as a string."""
    notes = Notes()
    lines = ["# Evaluation summary", ""]
    lines += meta_lines(meta)
    lines.append(
        "Per capacity (fast tier as a share of the workload's peak footprint): "
        "**fast** = share of the programs' memory traffic (user-mode accesses that miss the "
        "oracle's modeled cache) served by the fast tier; "
        f"**time** = modeled memory time (memory accesses x node latency, the kernel's and "
        f"the tiering's own included) relative to {BASELINE} "
        "at the same capacity, lower is better; **GiB** = pages migrated. "
        "Bold: the lowest modeled memory time at that capacity.")
    lines.append("")
    if not matrix.cells:
        lines += ["No runs.", ""]
    for workload in matrix.workloads:
        lines += workload_section(matrix, workload, notes, plots)
    if matrix.cells:
        lines += overall_section(matrix)
    if "overall" in plots:
        title, name = plots["overall"][0]
        lines += [f"![{title}]({name})", ""]
    remarks = []
    if matrix.repeated_cells:
        remarks.append(f"{matrix.repeated_cells} cell(s) were run more than once: they show the "
                       "mean of their successful runs and, in parentheses, the lowest and the "
                       "highest (each run's time against the mean of first-touch's); the plots "
                       "show the means, and the timelines the latest run.")
    remarks += warnings
    if plot_note:
        remarks.append(plot_note)
    if remarks:
        lines += [f"- {escape_cell(r)}" for r in remarks]
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Plots


def load_pyplot():
    """(pyplot, None), or (None, why not) when matplotlib cannot be imported."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        # SVG element ids are salted with a random value unless this is set; a fixed salt makes a
        # rerun on the same results give the same files, so committed plots diff cleanly.
        matplotlib.rcParams["svg.hashsalt"] = "objtier-eval"
    except Exception as e:  # ImportError, but also a broken install (e.g. a numpy ABI mismatch)
        return None, f"{type(e).__name__}: {e} (python {sys.executable})"
    return plt, None


def config_colors(plt, configs):
    """A fixed color per config, the same in every plot."""
    cmap = plt.get_cmap("tab10" if len(configs) <= 10 else "tab20")
    return {config: cmap(i % cmap.N) for i, config in enumerate(configs)}


def grouped_bars(ax, groups, series, values, colors, failed=()):
    """Bars for each series (config) side by side within each group (capacity).

    values[(series, group)] is the height, or missing for no bar; a (series, group) in failed gets
    a small "failed" mark where its bar would be, so that a gap is not read as zero.
    """
    present = [s for s in series if any((s, g) in values or (s, g) in failed for g in groups)]
    width = 0.8 / max(len(present), 1)
    for i, name in enumerate(present):
        xs = []
        heights = []
        for j, group in enumerate(groups):
            x = j - 0.4 + width * (i + 0.5)
            if (name, group) in values:
                xs.append(x)
                heights.append(values[(name, group)])
            elif (name, group) in failed:
                ax.text(x, 0, " failed", rotation=90, ha="center", va="bottom",
                        fontsize="x-small", color=colors[name])
        ax.bar(xs, heights, width, label=name, color=colors[name])
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([capacity_label(g) for g in groups])
    ax.set_xlabel("fast tier capacity (share of peak footprint)")
    return bool(present)


def save(plt, fig, ax, path):
    """Saves with the legend outside the axes; no date in the SVG, so reruns give the same file."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


def plot_metric(plt, matrix, workload, colors, path, metric, title, ylabel):
    """A grouped bar chart of one per-run number; False when no run has it."""
    values = {}
    failed = set()
    for (w, config, capacity) in matrix.cells:
        if w != workload:
            continue
        runs = ok_runs(matrix, w, config, capacity)
        value = runs_mean(runs, metric)
        if not runs:
            failed.add((config, capacity))
        elif value is not None:
            values[(config, capacity)] = value * 100 if metric == "fast_share" else value
    if not values:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.5))
    grouped_bars(ax, workload_capacities(matrix, workload), matrix.configs, values, colors,
                 failed)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if metric == "fast_share":
        ax.set_ylim(0, 100)
    save(plt, fig, ax, path)
    return True


def plot_timeline(plt, matrix, workload, capacity, colors, path):
    """Fast share over time, one line per config; False when no run has a timeline."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    drawn = False
    for config in matrix.configs:
        run = ok_run(matrix, workload, config, capacity)
        if run is None or not run.timeline:
            continue
        ts = [t for t, _ in run.timeline]
        shares = [share * 100 for _, share in run.timeline]
        ax.plot(ts, shares, label=config, color=colors[config], linewidth=1.2)
        drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_title(f"{workload}: fast-tier share over time at {capacity_label(capacity)}")
    ax.set_xlabel("time since start of the measured window (s)")
    ax.set_ylabel("fast-tier share of accesses (%)")
    ax.set_ylim(0, 100)
    save(plt, fig, ax, path)
    return True


def plot_overall(plt, matrix, colors, path):
    """Geomean relative modeled memory time per config and capacity; False without a baseline."""
    values = {}
    for config in matrix.configs:
        for capacity in matrix.capacities:
            mean, _, _ = relative_geomean(matrix, config, capacity)
            if mean is not None:
                values[(config, capacity)] = mean
    if not values:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.5))
    grouped_bars(ax, matrix.capacities, matrix.configs, values, colors)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_title(f"Modeled memory time relative to {BASELINE} (geomean over workloads)")
    ax.set_ylabel(f"x {BASELINE}, lower is better")
    save(plt, fig, ax, path)
    return True


def file_safe(name):
    """A workload name usable in a file name."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def write_plots(plt, matrix, out_dir, preferred_capacity):
    """Writes the plots; returns {workload or 'overall': [(title, file name), ...]}."""
    colors = config_colors(plt, matrix.configs)
    plots = {}
    for workload in matrix.workloads:
        timeline_at = timeline_capacity(workload_capacities(matrix, workload), preferred_capacity)
        safe = file_safe(workload)
        written = []
        name = f"share-{safe}.svg"
        if plot_metric(plt, matrix, workload, colors, os.path.join(out_dir, name), "fast_share",
                       f"{workload}: fast-tier share of accesses", "fast-tier share (%)"):
            written.append(("fast-tier share", name))
        name = f"migrated-{safe}.svg"
        if plot_metric(plt, matrix, workload, colors, os.path.join(out_dir, name), "migrated_gib",
                       f"{workload}: pages migrated", "migrated (GiB)"):
            written.append(("migrated GiB", name))
        if timeline_at is not None:
            name = f"timeline-{safe}-{capacity_number(timeline_at)}.svg"
            if plot_timeline(plt, matrix, workload, timeline_at, colors,
                             os.path.join(out_dir, name)):
                written.append((f"fast share over time at {capacity_label(timeline_at)}", name))
        plots[workload] = written
    if plot_overall(plt, matrix, colors, os.path.join(out_dir, "overall.svg")):
        plots["overall"] = [("relative modeled memory time, all workloads", "overall.svg")]
    return plots


# ---------------------------------------------------------------------------------------------
# One row per run, for the harness

ROW_COLUMNS = [
    # (title, width); the last column (status) is not padded
    ("workload", 24),
    ("config", 22),
    ("cap", 6),
    ("fast", 7),
    ("mem s", 9),
    ("GiB", 8),
    ("wall s", 8),
    ("status", 0),
]


def format_fields(fields):
    """Fixed-width columns: text left-aligned, numbers right-aligned, two spaces between."""
    parts = []
    for (title, width), value in zip(ROW_COLUMNS, fields):
        if width == 0:
            parts.append(value)
        elif title in ("workload", "config"):
            parts.append(value.ljust(width))
        else:
            parts.append(value.rjust(width))
    return "  ".join(parts)


def format_header():
    return format_fields([title for title, _ in ROW_COLUMNS])


def format_seconds(seconds, digits):
    return "-" if seconds is None else f"{seconds:.{digits}f}"


def format_row(run):
    """One line for one run; a failed run's error follows its status."""
    status = "ok" if run.ok else "failed: " + " ".join(run.error.split())
    return format_fields([
        run.workload,
        run.config,
        capacity_number(run.capacity) + "%",
        format_percent(run.fast_share).replace(" ", ""),
        format_seconds(run.modeled_s, 3),
        format_gib(run.migrated_gib),
        format_seconds(run.wall_s, 1),
        status,
    ])


def read_one_run(source):
    """The run in a file holding one JSON object ('-' for stdin); the last line if it is jsonl."""
    if source == "-":
        text = sys.stdin.read()
    else:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    try:
        return to_run(json.loads(text))
    except ValueError:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) <= 1:
            raise
        return to_run(json.loads(lines[-1]))


# ---------------------------------------------------------------------------------------------


def report(results_dir, preferred_capacity=DEFAULT_TIMELINE_CAPACITY, plots_enabled=True):
    """Writes summary.md and the plots into results_dir; returns the summary's path."""
    runs, warnings = read_runs(os.path.join(results_dir, RUNS_FILE))
    for warning in warnings:
        print(f"report: {warning}", file=sys.stderr)
    matrix = build_matrix(runs)
    meta = read_meta(os.path.join(results_dir, META_FILE))
    plots = {}
    plot_note = None
    if plots_enabled:
        plt, why = load_pyplot()
        if plt is None:
            plot_note = f"Plots skipped: matplotlib could not be imported ({why})."
            print(f"report: {plot_note}", file=sys.stderr)
        else:
            plots = write_plots(plt, matrix, results_dir, preferred_capacity)
    path = os.path.join(results_dir, SUMMARY_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_summary(matrix, meta, plots, plot_note, warnings))
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results_dir", nargs="?", help="folder with runs.jsonl")
    parser.add_argument("--header", action="store_true", help="print the per-run table header")
    parser.add_argument("--row", metavar="RUN_JSON_FILE",
                        help="print one table row for the run in this file ('-': stdin)")
    parser.add_argument("--timeline-capacity", type=float, default=DEFAULT_TIMELINE_CAPACITY,
                        help="capacity of the timeline plots (default 0.25, else the closest)")
    parser.add_argument("--no-plots", action="store_true", help="write summary.md only")
    args = parser.parse_args(argv)

    if args.header or args.row:
        if args.header:
            print(format_header())
        if args.row:
            try:
                print(format_row(read_one_run(args.row)))
            except (OSError, ValueError) as e:
                print(f"report: cannot read a run from {args.row}: {e}", file=sys.stderr)
                return 1
        return 0
    if not args.results_dir:
        parser.error("give RESULTS_DIR, --header or --row")
    try:
        path = report(args.results_dir, args.timeline_capacity, not args.no_plots)
    except OSError as e:
        print(f"report: {e}", file=sys.stderr)
        return 1
    print(f"report: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
