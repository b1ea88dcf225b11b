"""reckon for PyTorch, as users run it: separate Python processes (Debian's
python3 and python3-torch), each a training loop with `reckon.torch.Peer`,
gossiping over real gRPC on loopback. They end with the same replica.

Run by ctest with PYTHONPATH set to the build's python/ folder."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_peers(n, extra, extra_of=lambda i: []):
    """n peer processes t0 (with /metrics) to t{n-1}, each on its shard of n,
    with `extra` arguments and its own, extra_of(i); their outputs' last
    lines as JSON, or the failure."""
    ports = [free_port() for _ in range(n)]
    seeds = ",".join(f"127.0.0.1:{p}" for p in ports)
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "peer_process.py"),
                               f"t{i}", str(ports[i]), seeds, str(i), str(n)]
                              + (["--metrics"] if i == 0 else []) + extra + extra_of(i),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(n)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        if p.returncode != 0:
            raise AssertionError(f"exit {p.returncode}: {err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def run_two(extra, extra_of=lambda i: []):
    return run_peers(2, extra, extra_of)


class TorchPeers(unittest.TestCase):
    def test_two_torch_processes_end_with_the_same_replica(self):
        a, b = results = run_two([])
        self.assertEqual(a["weight_hash"], b["weight_hash"])
        for r in results:
            # 2 epochs of a 3,000-sample shard in batches of 64.
            self.assertEqual(r["steps"], 2 * (3000 // 64))
            # Trained: a 784-64-10 MLP on 6,000 images reaches about 80%.
            self.assertGreater(r["accuracy"], 0.70, r)
            # Far less than the dense float32 gradients DDP would send.
            dense = r["steps"] * r["params"] * 4
            self.assertLess(r["bytes_sent"] * 20, dense, r)
            print(f"FIGURES torch peer {r['node_id']}: accuracy {r['accuracy']:.4f}, "
                  f"{r['bytes_sent']} bytes sent in {r['steps']} steps "
                  f"({dense / max(1, r['bytes_sent']):.0f}x less than dense float32)")
        self.assertEqual(a["accuracy"], b["accuracy"])
        # t0 served /metrics as reckon-worker does: its steps and bytes.
        m = a["metrics"]
        self.assertEqual(m["reckon_steps_total"], a["steps"], m)
        self.assertEqual(m["reckon_sent_bytes_total"], a["bytes_sent"], m)
        self.assertEqual(m["reckon_samples_total"], a["steps"] * 64, m)
        self.assertGreater(m["reckon_train_loss"], 0, m)
        self.assertEqual(m["reckon_training_finished"], 1, m)
        self.assertEqual(m["reckon_updates_applied_total"], b["steps"], m)  # t1's messages

    def test_with_mutual_tls_they_end_with_the_same_replica(self):
        # Certificates from `reckonctl certs`, as reckon-worker's: the
        # streams are TLS, every update signed and verified.
        ctl = os.environ.get("RECKONCTL")
        self.assertTrue(ctl, "RECKONCTL (the reckonctl binary) is not set")
        certs = tempfile.mkdtemp(prefix="reckon-torch-tls-")
        subprocess.run([ctl, "certs", "--out", certs, "--nodes", "t0,t1"], check=True,
                       capture_output=True)
        a, b = run_two(["--tls", certs])
        self.assertEqual(a["weight_hash"], b["weight_hash"])
        self.assertEqual(a["metrics"]["reckon_signature_errors_total"], 0)
        self.assertEqual(a["metrics"]["reckon_updates_applied_total"], b["steps"])
        # A certificate of another node is refused by name.
        wrong = subprocess.run(
            [sys.executable, "-c",
             "import reckon, numpy\n"
             f"reckon.FlatPeer('t0', 'm', numpy.zeros(4, numpy.float32), listen='127.0.0.1:0',"
             f" tls_ca='{certs}/ca.pem', tls_cert='{certs}/t1.pem', tls_key='{certs}/t1.key')"],
            capture_output=True, text=True)
        self.assertNotEqual(wrong.returncode, 0)
        self.assertIn("is for 't1', not node_id 't0'", wrong.stderr)

    def test_on_a_gpu_and_on_the_cpu_they_end_with_the_same_replica(self):
        # t0's model, batches and replica on the GPU (cuda/cuda_flat_replica.h),
        # t1's on the CPU: the same replica at the end, bit for bit.
        import torch
        import reckon
        if not reckon.built_with_cuda:
            self.skipTest("this reckon was built without CUDA (no nvcc)")
        if not torch.cuda.is_available():
            self.skipTest(f"no GPU for torch {torch.__version__} here")
        a, b = run_two([], lambda i: ["--device", "cuda"] if i == 0 else [])
        self.assertEqual(a["device"], "cuda:0")
        self.assertEqual(b["device"], "cpu")
        self.assertEqual(a["weight_hash"], b["weight_hash"])
        for r in (a, b):
            self.assertEqual(r["steps"], 2 * (3000 // 64))
            self.assertGreater(r["accuracy"], 0.70, r)
        self.assertEqual(a["metrics"]["reckon_updates_applied_total"], b["steps"])
        print(f"FIGURES torch peers on cuda and cpu: accuracy {a['accuracy']:.4f} and "
              f"{b['accuracy']:.4f}, {a['bytes_sent']} and {b['bytes_sent']} bytes sent")

    def test_two_on_a_gpu_and_one_on_the_cpu_end_with_one_replica(self):
        # t0 and t1 with model.cuda() (each its own replica on the GPU), t2 on
        # the CPU: the three replicas bit for bit the same at the end.
        import torch
        import reckon
        if not reckon.built_with_cuda:
            self.skipTest("this reckon was built without CUDA (no nvcc)")
        if not torch.cuda.is_available():
            self.skipTest(f"no GPU for torch {torch.__version__} here")
        results = run_peers(3, [], lambda i: ["--device", "cuda"] if i < 2 else [])
        self.assertEqual([r["device"] for r in results], ["cuda:0", "cuda:0", "cpu"])
        self.assertEqual(len({r["weight_hash"] for r in results}), 1, results)
        for r in results:
            self.assertEqual(r["steps"], 2 * (6000 // 3 // 64))
            self.assertGreater(r["accuracy"], 0.70, r)
        self.assertEqual(results[0]["metrics"]["reckon_updates_applied_total"],
                         results[1]["steps"] + results[2]["steps"])
        print("FIGURES torch peers on cuda, cuda and cpu: accuracy "
              + ", ".join(f"{r['accuracy']:.4f}" for r in results))

    def test_parameters_on_no_device_reckon_takes_are_refused_by_name(self):
        import torch
        import reckon.torch
        listen = f"127.0.0.1:{free_port()}"
        meta = torch.nn.Linear(4, 2, device="meta")
        with self.assertRaises(ValueError) as refused:
            reckon.torch.Peer(meta, node_id="m", listen=listen, bootstrap=True)
        self.assertIn("parameters on meta: cpu or cuda", str(refused.exception))
        mixed = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Linear(2, 2, device="meta"))
        with self.assertRaises(ValueError) as refused:
            reckon.torch.Peer(mixed, node_id="m", listen=listen, bootstrap=True)
        self.assertIn("parameter 1.weight is on meta, 0.weight on cpu: one device for all",
                      str(refused.exception))
        half = torch.nn.Linear(4, 2).half()
        with self.assertRaises(ValueError) as refused:
            reckon.torch.Peer(half, node_id="m", listen=listen, bootstrap=True)
        self.assertIn("parameter weight is torch.float16: float32 only", str(refused.exception))
        # The module under it: a host peer takes no device address, and
        # refuses it by name.
        import numpy
        host = reckon.FlatPeer("h", "m", numpy.zeros(4, numpy.float32),
                               listen=f"127.0.0.1:{free_port()}", bootstrap=True,
                               handle_sigterm=False)
        self.assertEqual(host.device, -1)
        with self.assertRaises(ValueError) as refused:
            host.step_cuda(1 << 20, 4, 0)
        self.assertIn("this peer's parameters are in host memory", str(refused.exception))

    def test_a_model_of_other_shapes_is_refused_naming_the_tensor(self):
        import torch
        import reckon.torch
        port = free_port()
        torch.manual_seed(0)
        a = reckon.torch.Peer(torch.nn.Linear(784, 64), node_id="a",
                              listen=f"127.0.0.1:{port}", bootstrap=True)
        self.assertEqual(a.address, f"127.0.0.1:{port}")
        with self.assertRaises(RuntimeError) as refused:
            reckon.torch.Peer(torch.nn.Linear(784, 32), node_id="b",
                              listen=f"127.0.0.1:{free_port()}", peers=[a.address])
        said = str(refused.exception)
        self.assertIn("the model differs: tensor 0 is", said)
        self.assertIn("'weight:32x784'", said)
        self.assertIn("'weight:64x784'", said)

    def test_a_heartbeat_the_failure_timeout_cannot_hold_twice_is_refused(self):
        import numpy
        import reckon
        with self.assertRaises(ValueError) as refused:
            reckon.FlatPeer("h", "m", numpy.zeros(4, numpy.float32),
                            listen=f"127.0.0.1:{free_port()}", heartbeat_ms=2000,
                            failure_timeout_s=3.0)
        self.assertIn("heartbeat_ms 2000 must be >= 1 and failure_timeout_s at least twice it",
                      str(refused.exception))
        # A slower beat the timeout holds: a peer that starts and says so.
        peer = reckon.FlatPeer("h", "m", numpy.zeros(4, numpy.float32),
                               listen=f"127.0.0.1:{free_port()}", heartbeat_ms=500,
                               bootstrap=True)
        self.assertTrue(peer.address.startswith("127.0.0.1:"))

    def test_sigterm_ends_the_wait_for_the_cluster_promptly(self):
        # A peer whose other seed never comes waits for it at the end;
        # SIGTERM ends that wait: reckon.Stopped, exit 3, within seconds.
        port = free_port()
        nobody = f"127.0.0.1:{free_port()}"
        p = subprocess.Popen([sys.executable, os.path.join(HERE, "peer_process.py"), "t0",
                              str(port), f"127.0.0.1:{port},{nobody}", "0", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err_head = []
        try:
            # Trained (92 steps, about a second): it says it waits for the cluster.
            for line in p.stderr:
                err_head.append(line)
                if "waiting for the cluster to be quiescent" in line:
                    break
            time.sleep(0.5)
            p.send_signal(signal.SIGTERM)
            sent = time.time()
            out, err = p.communicate(timeout=30)
            took = time.time() - sent
            err = "".join(err_head) + err
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 3, err[-3000:])
        stopped = json.loads(out.strip().splitlines()[-1])["stopped"]
        # reckon.Stopped names the signal and who sent it: this test.
        self.assertIn(f"stopped by a signal (SIGTERM from pid {os.getpid()} (", stopped)
        self.assertLess(took, 5.0)
        print(f"FIGURES torch peer: SIGTERM in the final wait ended it in {took:.2f} s")


if __name__ == "__main__":
    unittest.main()
