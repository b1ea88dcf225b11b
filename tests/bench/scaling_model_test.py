#!/usr/bin/env python3
"""Unit tests of tests/bench/scaling_model.py: the inbound rate's fit, reading
`reckonctl bench inbound --json` output, and the node term it feeds."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scaling_model.py")
spec = importlib.util.spec_from_file_location("scaling_model", SCRIPT)
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)


def bench_row(size, path, threads, updates_per_s):
    # The fields `reckonctl bench inbound --json` prints (ctl/bench_inbound.cc).
    return json.dumps({"size": size, "params": 14600000, "updates_per_message": 44000,
                       "path": path, "threads": threads, "updates_per_s": updates_per_s,
                       "messages_per_s": updates_per_s / 44000})


class InboundFit(unittest.TestCase):
    def test_the_fit_passes_through_both_measured_points(self):
        inbound = model.Inbound({1: 30e6, 2: 45e6}, "test")
        self.assertAlmostEqual(inbound.per_s(1), 30e6, delta=1)
        self.assertAlmostEqual(inbound.per_s(2), 45e6, delta=1)
        # p = (1 - 30/45) / (1 - 1/2) = 2/3: at most 3x one thread's rate.
        self.assertAlmostEqual(inbound.parallel_share, 2 / 3, places=9)
        self.assertAlmostEqual(inbound.per_s(1e12), 90e6, delta=1e3)
        self.assertLess(inbound.per_s(16), 90e6)

    def test_a_slower_second_thread_means_no_parallel_share(self):
        inbound = model.Inbound({1: 30e6, 2: 25e6}, "test")
        self.assertEqual(inbound.parallel_share, 0.0)
        self.assertAlmostEqual(inbound.per_s(64), 30e6, delta=1)

    def test_a_speedup_scales_every_thread_count_and_keeps_the_share(self):
        inbound = model.Inbound({1: 30e6, 2: 45e6}, "test").scaled(2.0, "why")
        self.assertEqual(inbound.by_threads, {1: 60e6, 2: 90e6})
        self.assertAlmostEqual(inbound.parallel_share, 2 / 3, places=9)
        self.assertAlmostEqual(inbound.per_s(16), 2 * model.Inbound({1: 30e6, 2: 45e6},
                                                                    "t").per_s(16), delta=1)
        self.assertIn("x 2: why", inbound.source)
        with self.assertRaises(ValueError):
            model.Inbound({1: 30e6, 2: 45e6}, "test").scaled(0, "why")

    def test_one_thread_is_required(self):
        with self.assertRaises(ValueError):
            model.Inbound({2: 45e6}, "test")


def read_lines(lines):
    """read_inbound_json of a file holding `lines`."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    try:
        return model.read_inbound_json(f.name)
    finally:
        os.unlink(f.name)


class ReadInboundJson(unittest.TestCase):
    def test_only_the_mirror_rows_at_strom_size_count_averaged_by_threads(self):
        inbound = read_lines(
            [bench_row("strom", "before", 1, 20e6), bench_row("strom", "mirror", 1, 30e6),
             bench_row("strom", "mirror", 1, 34e6), bench_row("strom", "mirror", 2, 44e6),
             bench_row("default", "mirror", 2, 99e6), "a log line, not JSON"])
        self.assertEqual(inbound.by_threads, {1: 32e6, 2: 44e6})

    def test_recorded_after_rows_are_the_mirror_rows(self):
        # Benches before 2026-11-30 named the mirror node's rows `after`.
        inbound = read_lines([bench_row("strom", "before", 1, 20e6),
                              bench_row("strom", "after", 1, 30e6),
                              bench_row("strom", "after", 2, 44e6)])
        self.assertEqual(inbound.by_threads, {1: 30e6, 2: 44e6})
        self.assertIn("mirror rows", inbound.source)

    def test_the_gpu_host_rows_come_first_where_there_are_some(self):
        # A worker's node without a mirror whose drain applies nothing: a
        # GPU worker's host, what the model's node term is.
        inbound = read_lines(
            [bench_row("strom", "after", 1, 30e6), bench_row("strom", "after", 2, 44e6),
             bench_row("strom", "worker", 1, 90e6), bench_row("strom", "worker", 2, 120e6),
             bench_row("strom", "gpu-host", 1, 110e6), bench_row("strom", "gpu-host", 2, 170e6),
             bench_row("strom", "gpu-host", 2, 180e6)])
        self.assertEqual(inbound.by_threads, {1: 110e6, 2: 175e6})
        self.assertIn("gpu-host rows", inbound.source)


class NodeTerm(unittest.TestCase):
    def test_the_node_term_is_the_peers_updates_over_the_measured_rate(self):
        rates = model.Rates(model.Inbound({1: 30e6, 2: 45e6}, "test"), node_cores=2)
        # 80 nodes, 69 KB messages of 12.5 bits an update: 79 x 44,160 updates.
        seconds, bound = model.step(80, 3.8e-3, 69e3, 25e9 / 8, rates)
        self.assertEqual(bound, "node CPU")
        self.assertAlmostEqual(seconds, 79 * 8 * 69e3 / 12.5 / 45e6, places=9)

    def test_at_the_compute_bound_inbound_the_node_no_longer_binds(self):
        rates = model.Rates(model.Inbound({1: 30e6, 2: 45e6}, "test"), node_cores=2)
        needed = model.compute_bound_inbound(80, 3.8e-3, 69e3, rates)
        faster = model.Rates(model.Inbound({1: 1.001 * needed, 2: 1.001 * needed}, "test"), 1)
        _, bound = model.step(80, 3.8e-3, 69e3, 25e9 / 8, faster)
        self.assertEqual(bound, "compute")

    def test_the_script_prints_the_table_and_refuses_a_missing_file(self):
        out = subprocess.run([sys.executable, SCRIPT, "--link-gbit", "25", "--nodes", "10,80"],
                             capture_output=True, text=True, check=True).stdout
        self.assertIn("| 80 |", out)
        self.assertIn("node inbound 1 thread", out)
        bad = subprocess.run([sys.executable, SCRIPT, "--inbound-json", "/nonexistent.json"],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--inbound-json /nonexistent.json", bad.stderr)

    def test_the_script_projects_a_speedup_and_refuses_a_bad_one(self):
        def node_rate(*extra):
            out = subprocess.run([sys.executable, SCRIPT, "--nodes", "80", *extra],
                                 capture_output=True, text=True, check=True).stdout
            head = out.splitlines()[0]
            return float(head.rsplit("receive threads: ", 1)[1].split(" M")[0]), out
        measured, _ = node_rate()
        projected, out = node_rate("--inbound-speedup", "1.5")
        self.assertAlmostEqual(projected, 1.5 * measured, delta=0.2)
        self.assertIn("projected with --inbound-speedup", out)
        bad = subprocess.run([sys.executable, SCRIPT, "--inbound-speedup", "-1"],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--inbound-speedup", bad.stderr)


if __name__ == "__main__":
    unittest.main()
