"""A training script as a DDP user writes one, with reckon.torch.Peer in
place of the DDP wrapper, started by torchrun (tests/torch/torchrun_test.py):
Peer(model) with no addresses reads torchrun's environment. A 784-64-10 MLP
on its shard of Fashion-MNIST (SHARD of SHARDS), SGD; it writes its pid and
steps to OUT_DIR/<node>.progress while it trains (the test kills it), and
its result to OUT_DIR/<node>.json."""
import gzip
import json
import os
import time

import numpy as np
import torch

import reckon.torch

DATA = os.environ.get("RECKON_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def idx(path, offset):
    with gzip.open(f"{DATA}/{path}") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def main():
    out = os.environ["OUT_DIR"]
    shard, shards = int(os.environ["SHARD"]), int(os.environ["SHARDS"])
    steps = int(os.environ.get("STEPS", "80"))
    torch.set_num_threads(1)
    images = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 784)[:8000]
    labels = idx("train-labels-idx1-ubyte.gz", 8)[:8000]
    x = torch.tensor(images[shard::shards], dtype=torch.float32) / 255.0
    y = torch.tensor(labels[shard::shards], dtype=torch.int64)
    torch.manual_seed(0)  # every process builds the same start
    model = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    start = [p.detach().clone() for p in model.parameters()]
    peer = reckon.torch.Peer(model, threshold=0.002, failure_timeout_s=2.0,
                             quiesce_timeout_s=120)
    node = f"port{int(os.environ['RECKON_PORT']) + int(os.environ['LOCAL_RANK'])}"
    joined_trained = any(not torch.equal(p, s) for p, s in zip(model.parameters(), start))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(shard)
    for step in range(steps):
        i = torch.randint(0, len(x), (64,), generator=generator)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i]), y[i]).backward()
        opt.step()
        peer.step(samples=64)
        with open(os.path.join(out, f"{node}.progress.tmp"), "w") as f:
            json.dump({"pid": os.getpid(), "step": step + 1, "restart": restart}, f)
        os.replace(os.path.join(out, f"{node}.progress.tmp"),
                   os.path.join(out, f"{node}.progress"))
        time.sleep(0.03)  # slow enough for the test to kill it mid-run
    peer.finish()
    with torch.no_grad():
        accuracy = float((model(x).argmax(1) == y).float().mean())
    with open(os.path.join(out, f"{node}.json"), "w") as f:
        json.dump({"node": peer.address, "weight_hash": peer.weight_hash(), "restart": restart,
                   "joined_trained": joined_trained, "steps": peer.steps,
                   "accuracy": accuracy, "rank": os.environ["RANK"]}, f)


if __name__ == "__main__":
    main()
