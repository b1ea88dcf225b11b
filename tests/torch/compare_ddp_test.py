"""examples/torch/compare_ddp.py runs (issue 36): both runs, 2 processes, 640
samples each, and says what the docs' table says: the accuracy of replicas
that ended identical, samples/s, the bytes on loopback, and reckon's fewer.

Run by ctest with PYTHONPATH set to the build's python/ folder."""
import json
import os
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                      "torch", "compare_ddp.py")


class CompareDdp(unittest.TestCase):
    def test_both_runs_report_identical_replicas_and_reckon_sends_less(self):
        out = subprocess.run([sys.executable, SCRIPT, "--workers", "2", "--limit", "640"],
                             capture_output=True, text=True, timeout=600)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        rows = {r["run"]: r for r in map(json.loads, out.stdout.strip().splitlines())}
        self.assertEqual(set(rows), {"ddp", "reckon"})
        for r in rows.values():
            self.assertTrue(r["replicas_identical"], r)
            self.assertGreater(r["accuracy"], 0.3, r)  # 10 steps of 64 already learn
            self.assertGreater(r["samples_per_s"], 0, r)
            self.assertGreater(r["loopback_bytes"], 0, r)
        self.assertGreater(rows["reckon"]["reckon_bytes_sent"], 0)
        self.assertLess(rows["reckon"]["loopback_bytes"], rows["ddp"]["loopback_bytes"])


if __name__ == "__main__":
    unittest.main()
