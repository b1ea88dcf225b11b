"""A PyTorch peer among reckon-worker processes (issue 36): two C++ workers
train the default model (784-512-512-10 ReLU) on real Fashion-MNIST; a
Python process joins their cluster with reckon.torch, the same network as a
torch.nn.Sequential of Linear layers (reckon's layout is theirs: each
layer's weight [out, in], then its bias), trains on the third shard, and
all three end with the same weight hash.

Run by ctest with PYTHONPATH set to the build's python/ folder and
RECKON_WORKER to the reckon-worker binary."""
import gzip
import json
import os
import socket
import subprocess
import tempfile
import unittest

import numpy as np
import torch

import reckon._reckon
import reckon.torch

DATA = "/usr/share/datasets/fashion-mnist"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def idx(path, offset):
    with gzip.open(f"{DATA}/{path}") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


class Interop(unittest.TestCase):
    def test_a_torch_peer_joins_reckon_workers_and_all_end_identical(self):
        worker = os.environ["RECKON_WORKER"]
        ports = [free_port(), free_port(), free_port()]
        addresses = [f"127.0.0.1:{p}" for p in ports]
        work = tempfile.mkdtemp(prefix="reckon-interop-")
        procs = []
        for i in range(2):
            args = [worker, "--node-id", f"w{i}", "--listen", addresses[i],
                    "--http-listen", "127.0.0.1:0", "--peers", ",".join(addresses),
                    "--shard", f"{i}/3", "--epochs", "1", "--progress", "off",
                    "--eval-samples", "1000", "--failure-timeout-ms", "2000",
                    "--quiesce-timeout-s", "200", "--threads", "1",
                    "--summary-json", os.path.join(work, f"w{i}.json")]
            if i == 0:
                args.append("--bootstrap")
            procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        try:
            images = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784)
            labels = idx("train-labels-idx1-ubyte.gz", 8)
            x = torch.tensor(images[2::3][:6000], dtype=torch.float32) / 255.0
            x = (x - x.mean(0)) / (x.std(0) + 1e-3)
            y = torch.tensor(labels[2::3][:6000], dtype=torch.int64)
            model = torch.nn.Sequential(
                torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                torch.nn.ReLU(), torch.nn.Linear(512, 10))
            # The workers' fingerprint: their model string and data; joined
            # from one that has trained (never from this process's own start).
            peer = reckon.torch.Peer(model, node_id="torch", model="784,512,512,10/relu",
                                     data=reckon._reckon.data_identity(DATA),
                                     listen=addresses[2], peers=addresses[:2],
                                     join_after_messages=1, failure_timeout_s=2.0,
                                     quiesce_timeout_s=200, threshold=0.005)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            for b in range(0, len(x), 100):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x[b:b + 100]), y[b:b + 100]).backward()
                opt.step()
                peer.step()
            peer.finish()
            ours = peer.weight_hash()
        finally:
            outs = []
            for p in procs:
                try:
                    outs.append(p.communicate(timeout=240))
                except subprocess.TimeoutExpired:
                    p.kill()
                    outs.append(p.communicate())
        for i, p in enumerate(procs):
            self.assertEqual(p.returncode, 0, outs[i][1][-3000:])
            with open(os.path.join(work, f"w{i}.json")) as f:
                summary = json.load(f)
            self.assertEqual(summary["weight_hash"], ours, f"w{i}")
        self.assertEqual(peer.steps, 60)
        print(f"FIGURES interop: a torch peer and two reckon-workers end at {ours[:16]}; "
              f"the torch peer sent {peer.bytes_sent} bytes in {peer.steps} steps")


if __name__ == "__main__":
    unittest.main()
