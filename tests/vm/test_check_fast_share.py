"""Unit tests of check_fast_share.py's verdicts on made-up tierbench runs, stalls included.

  python3 -m unittest -q tests/vm/test_check_fast_share.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_fast_share.py")
# The hot loop of every made-up run starts at this wall time; tick i ends 1 s after tick i-1.
START = 1_000_000.0


def run(shares, *args, stalls=None, all_fast_bytes=10):
    """Runs the check on a run whose ticks have `shares`; returns (status, output lines)."""
    with tempfile.TemporaryDirectory() as d:
        lines = [{"event": "setup", "hot": 2, "size_bytes": 1, "setup_seconds": 1.0,
                  "unix_time": START}]
        for i, share in enumerate(shares):
            lines.append({"event": "tick", "t": i + 1.0, "accesses": 100, "fast_share": share,
                          "hot_fast_bytes": 0, "unix_time": START + i + 1})
        lines.append({"event": "summary", "seconds": float(len(shares)), "accesses": 100,
                      "fast_share": 0.5, "fast_share_last": shares[-1], "hot_fast_bytes": 0,
                      "all_fast_bytes": all_fast_bytes, "unix_time": START + len(shares) + 1})
        path = os.path.join(d, "run.json")
        with open(path, "w") as f:
            f.write("".join(json.dumps(l) + "\n" for l in lines))
        if stalls is not None:
            stalls_path = os.path.join(d, "stalls")
            with open(stalls_path, "w") as f:
                f.write("".join(f"{cpu} {START + end:.3f} {dur:.3f}\n" for cpu, end, dur in stalls))
            args = ("--stalls", stalls_path) + args
        p = subprocess.run([sys.executable, CHECK, path, *args], capture_output=True, text=True)
        return p.returncode, p.stdout.splitlines()


# Slow for 12 ticks, then reached at t=13 s and kept.
LATE = [0.1] * 12 + [0.95] * 3


class Reach(unittest.TestCase):
    def test_a_late_reach_fails_without_stalls(self):
        status, out = run(LATE, "--reach", "0.9", "--within", "10")
        self.assertEqual(status, 1)
        self.assertIn("only at t=13.0s (limit 10.0s)", out[-1])

    def test_stalls_in_the_window_extend_the_deadline_once_each_second(self):
        # vCPU 0 stood still over [1, 4] s, vCPU 1 over [3, 5] s: 4 s of stall, not 5.
        status, out = run(LATE, "--reach", "0.9", "--within", "10",
                          stalls=[(0, 4.0, 3.0), (1, 5.0, 2.0)])
        self.assertEqual(status, 0, out)
        self.assertIn("limit 10.0s + 4.0s the guest stood still", out[-1])

    def test_stalls_after_the_reach_do_not_count(self):
        status, out = run(LATE, "--reach", "0.9", "--within", "10", stalls=[(0, 15.0, 1.5)])
        self.assertEqual(status, 1, out)

    def test_a_missing_stalls_file_counts_as_none(self):
        status, out = run(LATE, "--reach", "0.9", "--within", "10", "--stalls", "/nonexistent")
        self.assertEqual(status, 1, out)

    def test_a_deadline_missed_through_a_long_stall_is_a_stalled_verdict(self):
        status, out = run(LATE, "--reach", "0.9", "--within", "2", stalls=[(0, 8.0, 6.0)])
        self.assertEqual(status, 3, out)
        self.assertIn("limit 2.0s + 6.0s", out[-2])

    def test_never_reaching_through_a_long_stall_is_a_stalled_verdict(self):
        status, _ = run([0.1] * 10, "--reach", "0.9", "--within", "5", stalls=[(1, 9.0, 7.0)])
        self.assertEqual(status, 3)

    def test_never_reaching_with_short_stalls_fails(self):
        status, _ = run([0.1] * 10, "--reach", "0.9", "--within", "5", stalls=[(1, 9.0, 1.0)])
        self.assertEqual(status, 1)

    def test_a_cap_exceeded_fails_whatever_the_stalls(self):
        status, out = run(LATE, "--reach", "0.9", "--within", "2", "--max-fast-bytes", "5",
                          stalls=[(0, 8.0, 6.0)])
        self.assertEqual(status, 1, out)

    def test_a_dip_after_the_reach_fails(self):
        status, out = run([0.95, 0.5, 0.95], "--reach", "0.9", "--within", "5",
                          stalls=[(0, 2.5, 6.0)])
        self.assertEqual(status, 1, out)
        self.assertIn("fell to 0.500", out[-1])


if __name__ == "__main__":
    unittest.main()
