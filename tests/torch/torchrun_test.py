"""reckon.torch started by torchrun (issue 53), as Debian 12's torch 1.13
runs it (`python3 -m torch.distributed.run -r 1 -t 1`: without them its
redirect parser stops at start):

- one torchrun, two processes: Peer(model) finds its peers through
  torchrun's TCPStore; both end identical;
- one torchrun a "host" (each its own rendezvous, RECKON_SEEDS): one
  process is killed with SIGKILL mid-run, its torchrun restarts it, it
  re-joins from the survivor's snapshot, the survivor never restarts, and
  both end identical.

Run by ctest with PYTHONPATH set to the build's python/ folder."""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from torch_peers_test import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torchrun_worker.py")


def torchrun(nproc, env, out_dir, max_restarts=0):
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "-r", "1", "-t", "1",
         "--nnodes", "1", "--nproc_per_node", str(nproc), "--max_restarts", str(max_restarts),
         "--monitor_interval", "1", "--master_addr", "127.0.0.1",
         "--master_port", str(free_port()), WORKER],
        env=dict(os.environ, OUT_DIR=out_dir, RECKON_ADVERTISE="127.0.0.1", **env),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def results(out_dir):
    found = []
    for path in sorted(glob.glob(os.path.join(out_dir, "*.json"))):
        with open(path) as f:
            found.append(json.load(f))
    return found


class Torchrun(unittest.TestCase):
    def test_one_torchrun_two_processes_find_each_other_and_end_identical(self):
        out_dir = tempfile.mkdtemp(prefix="reckon-torchrun-")
        run = torchrun(2, {"RECKON_PORT": str(free_port()), "SHARD": "0", "SHARDS": "1"},
                       out_dir)
        log, _ = run.communicate(timeout=300)
        self.assertEqual(run.returncode, 0, log[-4000:])
        a, b = results(out_dir)
        self.assertEqual({a["rank"], b["rank"]}, {"0", "1"})
        self.assertEqual(a["weight_hash"], b["weight_hash"])
        self.assertGreater(a["accuracy"], 0.6, a)

    def test_a_killed_process_is_restarted_by_torchrun_and_rejoins(self):
        out_dir = tempfile.mkdtemp(prefix="reckon-torchrun-")
        ports = [free_port(), free_port()]
        seeds = ",".join(f"127.0.0.1:{p}" for p in ports)
        runs = [torchrun(1, {"RECKON_PORT": str(ports[i]), "RECKON_SEEDS": seeds,
                             "SHARD": str(i), "SHARDS": "2", "STEPS": "120"}, out_dir,
                         max_restarts=1) for i in range(2)]
        victim = os.path.join(out_dir, f"port{ports[1]}.progress")
        deadline = time.time() + 120
        progress = None
        while time.time() < deadline:
            try:
                with open(victim) as f:
                    progress = json.load(f)
            except (FileNotFoundError, json.JSONDecodeError):
                progress = None
            if progress and progress["step"] >= 30:
                break
            time.sleep(0.05)
        self.assertTrue(progress and progress["step"] >= 30, "the second process never trained")
        os.kill(progress["pid"], signal.SIGKILL)
        logs = [r.communicate(timeout=300)[0] for r in runs]
        for r, log in zip(runs, logs):
            self.assertEqual(r.returncode, 0, log[-4000:])
        survivor, restarted = sorted(results(out_dir),
                                     key=lambda r: r["node"] != f"127.0.0.1:{ports[0]}")
        self.assertEqual(survivor["restart"], 0, survivor)
        self.assertEqual(survivor["steps"], 120)
        self.assertEqual(restarted["restart"], 1, restarted)
        # It re-joined the cluster it left (the survivor's replica, which
        # holds what it had published), not its own initial weights.
        self.assertTrue(restarted["joined_trained"], restarted)
        self.assertEqual(survivor["weight_hash"], restarted["weight_hash"])
        self.assertGreater(survivor["accuracy"], 0.6, survivor)
        print(f"FIGURES torchrun: killed at step {progress['step']}, restarted, re-joined; "
              f"accuracy {survivor['accuracy']:.4f}, replicas identical")


if __name__ == "__main__":
    unittest.main()
