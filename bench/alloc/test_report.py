"""Unit tests of bench/alloc/report.py on synthetic results (made-up numbers).

Run from the repository root: python3 -m unittest bench/alloc/test_report.py
"""
import contextlib
import io
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402

CONFIGS = ["glibc", "mimalloc", "mimalloc-paged", "jemalloc", "objtier", "objtier+daemon",
           "objtier+daemon-cold"]


class Intervals(unittest.TestCase):
    def test_identical_rounds_give_a_point(self):
        pairs = [(2.0, 1.0)] * 5
        self.assertEqual(report.ratio_interval(pairs, random.Random(1)), (2.0, 2.0))

    def test_the_interval_holds_the_ratio_of_medians_and_widens_with_noise(self):
        quiet = [(1.10 + d, 1.00 + d) for d in (0.0, 0.01, -0.01, 0.02, -0.02)]
        noisy = [(1.10 * f, 1.00 * g) for f, g in
                 ((1.0, 1.0), (1.2, 0.9), (0.85, 1.1), (1.1, 0.95), (0.9, 1.15))]
        low_q, high_q = report.ratio_interval(quiet, random.Random(1))
        low_n, high_n = report.ratio_interval(noisy, random.Random(1))
        self.assertLessEqual(low_q, 1.10)
        self.assertGreaterEqual(high_q, 1.10)
        self.assertGreater(high_n - low_n, high_q - low_q)

    def test_the_same_results_give_the_same_interval(self):
        pairs = [(1.0 + i / 10, 1.0 + (i % 3) / 10) for i in range(7)]
        self.assertEqual(report.ratio_interval(pairs, random.Random(report.SEED)),
                         report.ratio_interval(pairs, random.Random(report.SEED)))

    def test_geomean_interval_of_constant_ratios(self):
        low, high = report.geomean_interval([[(2.0, 1.0)] * 3, [(0.5, 1.0)] * 3],
                                            random.Random(1))
        self.assertAlmostEqual(low, 1.0)
        self.assertAlmostEqual(high, 1.0)

    def test_percentile_interpolates(self):
        self.assertEqual(report.percentile([1.0, 2.0, 3.0], 0.5), 2.0)
        self.assertAlmostEqual(report.percentile([1.0, 2.0], 0.25), 1.25)
        self.assertEqual(report.percentile([4.0], 0.9), 4.0)


class Verdicts(unittest.TestCase):
    def test_every_workload_limit(self):
        ratios = [("a", 1.02), ("b", 1.20), ("c", 1.07)]
        intervals = {"a": (0.98, 1.05), "b": (1.12, 1.28), "c": (0.99, 1.15)}
        self.assertEqual(report.verdict_of(ratios, 1.09, None, 1.05, None, intervals),
                         "not met on 2 of 3 (beyond noise on b)")
        intervals["b"] = (1.0, 1.3)
        self.assertEqual(report.verdict_of(ratios, 1.09, None, 1.05, None, intervals),
                         "not met on 2 of 3 (none beyond noise)")
        self.assertEqual(report.verdict_of([("a", 1.0)], 1.0, None, 1.05, None, {}), "met")

    def test_mean_limit(self):
        self.assertEqual(report.verdict_of([("a", 1.03)], 1.03, (1.01, 1.05), None, 1.02, {}),
                         "not met (within noise)")
        self.assertEqual(report.verdict_of([("a", 1.03)], 1.03, (1.025, 1.05), None, 1.02, {}),
                         "not met (beyond noise)")
        self.assertEqual(report.verdict_of([("a", 1.01)], 1.01, (0.99, 1.03), None, 1.02, {}),
                         "met")

    def test_no_limit_is_for_reading(self):
        self.assertEqual(report.verdict_of([("a", 3.0)], 3.0, None, None, None, {}),
                         "for reading")


class WholeReport(unittest.TestCase):
    def test_report_from_results(self):
        rng = random.Random(7)
        base = {"glibc": 1.0, "mimalloc": 0.8, "mimalloc-paged": 0.85, "jemalloc": 0.9,
                "objtier": 0.84, "objtier+daemon": 0.86, "objtier+daemon-cold": 0.88}
        with tempfile.TemporaryDirectory() as tmp:
            results = os.path.join(tmp, "results.tsv")
            with open(results, "w") as f:
                for _ in range(5):  # rounds, as bench/alloc/run interleaves them
                    for workload in ("w1", "w2"):
                        load = rng.uniform(0.9, 1.2)  # a round's background load
                        for config in CONFIGS:
                            seconds = base[config] * load * rng.uniform(0.98, 1.02)
                            f.write(f"{workload}\t{config}\t{seconds:.4f}\t{100000}\n")
            descriptions = os.path.join(tmp, "descriptions")
            with open(descriptions, "w") as f:
                f.write("w1\tthe first\nw2\tthe second\n")
            header = os.path.join(tmp, "header")
            with open(header, "w") as f:
                f.write("machine: made up\n")
            out = os.path.join(tmp, "report.md")
            argv = ["report.py", "--results", results, "--workloads", "w1,w2", "--configs",
                    ",".join(CONFIGS), "--runs", "5", "--descriptions", descriptions,
                    "--header", header, "--out", out]
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout):
                old_argv, sys.argv = sys.argv, argv
                try:
                    report.main()
                finally:
                    sys.argv = old_argv
            with open(out) as f:
                markdown = f.read()
        self.assertIn("## The targets per workload", markdown)
        self.assertIn("90 % interval", markdown)
        # objtier is 1.05x mimalloc in every round, give or take 4 %: the ratio, an interval
        # around it, and a verdict that is not met but not beyond noise either.
        line = next(l for l in markdown.splitlines() if l.startswith("| objtier time vs mimalloc |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        self.assertAlmostEqual(float(cells[1]), 1.05, delta=0.02)
        low, high = (float(x) for x in cells[2].split("-"))
        self.assertLess(low, float(cells[1]))
        self.assertGreater(high, float(cells[1]))
        # Faster than glibc in every round, far beyond noise: met.
        line = next(l for l in markdown.splitlines() if l.startswith("| objtier time vs glibc |"))
        self.assertTrue(line.rstrip(" |").endswith("met"))
        self.assertIn("the targets' ratios per workload", stdout.getvalue())
        # The cold daemon is for reading: a ratio, no target.
        line = next(l for l in markdown.splitlines()
                    if l.startswith("| objtier+daemon-cold time vs objtier |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        self.assertAlmostEqual(float(cells[1]), 0.88 / 0.84, delta=0.03)
        self.assertTrue(line.rstrip(" |").endswith("for reading"))


if __name__ == "__main__":
    unittest.main()
