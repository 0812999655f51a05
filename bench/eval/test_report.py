"""Unit tests of bench/eval/report.py on a small synthetic runs.jsonl (made-up numbers).

Run from the repository root: python3 -m unittest bench/eval/test_report.py
"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402


def run_line(workload, config, capacity, modeled_s, fast_share, migrated_gib=0.0, **extra):
    """One synthetic run as report.py expects it from the harness."""
    run = {
        "workload": workload,
        "config": config,
        "capacity": capacity,
        "footprint_mib": 256.0,
        "os_mib": 180.0,
        "fast_node_mib": 180 + int(256 * capacity),
        "status": "ok",
        "wall_s": 80.0,
        "oracle": {
            "nodes": [
                {"node": 0, "loads": 100, "stores": 10, "latency_ns": 80, "fast": True},
                {"node": 1, "loads": 50, "stores": 5, "latency_ns": 320, "fast": False},
            ],
            "other": {"loads": 0, "stores": 0},
            "fast_share": fast_share,
            "modeled_memory_s": modeled_s,
        },
        "timeline": [
            {"t": 1.0, "fast_share": fast_share / 2, "accesses": 1000},
            {"t": 2.0, "fast_share": fast_share, "accesses": 1000},
        ],
        "migrated": {"objtier_pages_moved": 1234},
        "migrated_gib": migrated_gib,
    }
    run.update(extra)
    return run


def failed_line(workload, config, capacity, error):
    """A failed run: no oracle counts, no timeline, no migration numbers."""
    return {"workload": workload, "config": config, "capacity": capacity, "status": "failed",
            "error": error}


def synthetic_runs():
    """Two workloads x four configs x two capacities, with the awkward cases mixed in.

    - tierbench-static: objtier-apb-alloc wins at both capacities (0.80x, 0.90x); damos fails at
      50 %; the objtier-lru-time cell at 25 % is run twice (0.52x, 1.10x): the cell shows their
      mean (1.62 s, 0.81x) with the range, and does not win against apb-alloc's 1.6 s, though
      its first run alone would have; first-touch at 50 % is run twice too, and failed once.
    - pagerank: no first-touch at all, so no relative times; damos wins at 25 % by absolute time;
      numab-tiering has no timeline.
    """
    return [
        run_line("tierbench-static", "first-touch", 0.25, 2.0, 0.50),
        run_line("tierbench-static", "first-touch", 0.5, 1.0, 0.80),
        run_line("tierbench-static", "objtier-apb-alloc", 0.25, 1.6, 0.71, 0.005),
        run_line("tierbench-static", "objtier-apb-alloc", 0.5, 0.9, 0.90, 0.25),
        run_line("tierbench-static", "objtier-lru-time", 0.25, 1.04, 0.95, 3.0),
        run_line("tierbench-static", "damos", 0.25, 1.9, 0.55, 0.5),
        failed_line("tierbench-static", "damos", 0.5, "guest | panic: out of memory\nkilled"),
        run_line("tierbench-static", "objtier-lru-time", 0.25, 2.2, 0.40, 1.0),
        run_line("tierbench-static", "objtier-lru-time", 0.5, 0.95, 0.85, 0.5),
        failed_line("tierbench-static", "first-touch", 0.5, "exit 124: timed out"),
        run_line("pagerank", "damos", 0.25, 3.0, 0.60, 0.1),
        run_line("pagerank", "numab-tiering", 0.25, 3.5, 0.55, 0.2, timeline=None),
        run_line("pagerank", "objtier-apb-alloc", 0.25, 3.2, 0.58, 0.3),
    ]


def matplotlib_present():
    plt, _ = report.load_pyplot()
    return plt is not None


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        with open(os.path.join(self.dir, "runs.jsonl"), "w") as f:
            for run in synthetic_runs():
                f.write(json.dumps(run) + "\n")
            f.write('{"workload": "cut short by an interrupted harn\n')
        with open(os.path.join(self.dir, "meta.json"), "w") as f:
            json.dump({"started": "2025-01-01T00:00:00", "git": "abc123"}, f)

    def tearDown(self):
        self.tmp.cleanup()

    def write_report(self, **kwargs):
        with contextlib.redirect_stderr(io.StringIO()) as stderr:
            path = report.report(self.dir, **kwargs)
        with open(path) as f:
            return f.read(), stderr.getvalue()

    def table_row(self, summary, workload, config):
        """The cells of config's row in workload's table."""
        section = summary.split(f"### {workload}\n", 1)[1].split("###", 1)[0]
        for line in section.splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if cells[0] == config:
                return cells
        self.fail(f"no row for {config} in {workload}")

    def overall_row(self, summary, config):
        section = summary.split("## All workloads\n", 1)[1]
        for line in section.splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if cells[0] == config:
                return cells
        self.fail(f"no row for {config} in the overall table")

    def test_relative_times_and_bold_winner(self):
        summary, _ = self.write_report(plots_enabled=False)
        # Columns: config, then fast, time, GiB at 25 %, then at 50 %.
        self.assertEqual(self.table_row(summary, "tierbench-static", "first-touch"),
                         ["first-touch", "50.0 %", "1.00x", "0.00", "80.0 %", "1.00x", "0.00"])
        self.assertEqual(self.table_row(summary, "tierbench-static", "objtier-apb-alloc"),
                         ["objtier-apb-alloc", "**71.0 %**", "**0.80x**", "**0.0050**",
                          "**90.0 %**", "**0.90x**", "**0.25**"])

    def test_repeats_show_their_mean_and_range(self):
        summary, _ = self.write_report(plots_enabled=False)
        row = self.table_row(summary, "tierbench-static", "objtier-lru-time")
        # (1.04 + 2.2) / 2 = 1.62 s against first-touch's 2.0 s; runs 0.52x and 1.10x.
        self.assertEqual(row[1:4], ["67.5 % (40.0-95.0)", "0.81x (0.52-1.10)", "2.00 (1.00-3.00)"])
        # The mean decides the winner: apb-alloc's 1.6 s beats 1.62 s.
        self.assertEqual(self.table_row(summary, "tierbench-static", "objtier-apb-alloc")[2],
                         "**0.80x**")
        # A failed repeat leaves the successful run alone in its cell, with no range or note.
        self.assertEqual(self.table_row(summary, "tierbench-static", "first-touch")[4:],
                         ["80.0 %", "1.00x", "0.00"])
        self.assertIn("2 cell(s) were run more than once", summary)

    def test_failed_run_has_a_note(self):
        summary, _ = self.write_report(plots_enabled=False)
        row = self.table_row(summary, "tierbench-static", "damos")
        self.assertEqual(row[4:], ["failed [1]", "", ""])
        self.assertIn("- [1] tierbench-static, damos, 50 %: guest \\| panic: out of memory killed",
                      summary)

    def test_no_baseline_gives_dashes_but_a_winner(self):
        summary, _ = self.write_report(plots_enabled=False)
        self.assertEqual(self.table_row(summary, "pagerank", "damos")[1:4],
                         ["**60.0 %**", "-", "**0.10**"])
        # pagerank ran at 25 % only: no 50 % columns.
        self.assertEqual(self.table_row(summary, "pagerank", "numab-tiering"),
                         ["numab-tiering", "55.0 %", "-", "0.20"])

    def test_cross_workload_summary(self):
        summary, _ = self.write_report(plots_enabled=False)
        # Only tierbench-static has a baseline: geomeans are its ratios.
        self.assertEqual(self.overall_row(summary, "objtier-apb-alloc"),
                         ["objtier-apb-alloc", "0.80x", "0.90x", "1 of 2", "1 of 1"])
        self.assertEqual(self.overall_row(summary, "damos"),
                         ["damos", "0.95x", "-", "1 of 2", "0 of 1"])
        self.assertEqual(self.overall_row(summary, "first-touch"),
                         ["first-touch", "1.00x", "1.00x", "0 of 2", "0 of 1"])

    def test_skipped_line_is_reported(self):
        summary, stderr = self.write_report(plots_enabled=False)
        self.assertIn("runs.jsonl line 14 skipped", summary)
        self.assertIn("runs.jsonl line 14 skipped", stderr)
        self.assertIn("- git: `abc123`", summary)

    def test_without_matplotlib_summary_says_plots_were_skipped(self):
        with mock.patch.object(report, "load_pyplot", return_value=(None, "ImportError: none")):
            summary, stderr = self.write_report()
        self.assertIn("Plots skipped: matplotlib could not be imported (ImportError: none)",
                      summary)
        self.assertIn("Plots skipped", stderr)
        self.assertNotIn(".svg", summary)

    @unittest.skipUnless(matplotlib_present(), "matplotlib is not importable")
    def test_plots_are_written_and_linked(self):
        summary, _ = self.write_report()
        expected = [
            "share-tierbench-static.svg", "migrated-tierbench-static.svg",
            "timeline-tierbench-static-25.svg", "share-pagerank.svg", "migrated-pagerank.svg",
            "timeline-pagerank-25.svg", "overall.svg",
        ]
        for name in expected:
            path = os.path.join(self.dir, name)
            self.assertTrue(os.path.getsize(path) > 0, name)
            self.assertIn(f"({name})", summary)

    def test_row_matches_header(self):
        run = report.to_run(synthetic_runs()[2])
        header = report.format_header()
        row = report.format_row(run)
        self.assertEqual(header.split(), ["workload", "config", "cap", "fast", "mem", "s", "GiB",
                                          "wall", "s", "status"])
        self.assertEqual(row.split(), ["tierbench-static", "objtier-apb-alloc", "25%", "71.0%",
                                       "1.600", "0.0050", "80.0", "ok"])
        self.assertEqual(header.index("status"), row.index("ok"))

    def test_row_of_a_failed_run_from_stdin(self):
        text = json.dumps(synthetic_runs()[6])
        with mock.patch("sys.stdin", io.StringIO(text)), \
                contextlib.redirect_stdout(io.StringIO()) as stdout:
            self.assertEqual(report.main(["--row", "-"]), 0)
        line = stdout.getvalue().rstrip("\n")
        self.assertTrue(line.endswith("failed: guest | panic: out of memory killed"), line)
        self.assertIn("50%", line)


if __name__ == "__main__":
    unittest.main()


class RunHelpTest(unittest.TestCase):
    def test_help_prints_every_default_configuration(self):
        # A configuration name can hold a % (objtier-apb-alloc:10%), which argparse's help formatting
        # once took for a format directive and crashed on.
        import subprocess

        run = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run")
        out = subprocess.run([sys.executable, run, "--help"], capture_output=True, text=True, check=True).stdout
        self.assertIn("objtier-apb-alloc:10%", out.replace("\n", "").replace(" ", ""))
