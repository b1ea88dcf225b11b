#!/usr/bin/python3
"""reckon against PyTorch DDP on the same small CNN (issue 36): N processes
on this machine, Fashion-MNIST (Debian's dataset-fashion-mnist) in N
disjoint shards, the same seed, model, batch, learning rate and epochs;
once with DDP over gloo (gradients averaged every step), once with
reckon.torch (each step's change published as +-tau updates). Prints one
JSON line per run: test accuracy, samples/s of the whole cluster, and the
bytes that went over loopback meanwhile (measured: /sys/class/net/lo
counters, so nothing else should use loopback during a run), beside what
each process says it sent.

    examples/torch/compare_ddp.py [--workers 4] [--epochs 1] [--runs ddp,reckon]

Needs Debian's python3 with python3-torch and the reckon package (the
README's main set-up command installs it; or PYTHONPATH=build/python).
Figures: docs/benchmarks.md "reckon against DDP".
"""
import argparse
import gzip
import json
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.multiprocessing as mp

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path, offset):
    with gzip.open(f"{DATA}/{path}") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def load(split):
    prefix = "train" if split == "train" else "t10k"
    x = idx(f"{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    y = idx(f"{prefix}-labels-idx1-ubyte.gz", 8)
    x = torch.tensor(x, dtype=torch.float32) / 255.0
    return (x - 0.286) / 0.353, torch.tensor(y, dtype=torch.int64)


def cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, 10))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lo_bytes():
    with open("/sys/class/net/lo/statistics/tx_bytes") as f:
        return int(f.read())


def train(rank, args, mode, ports, results):
    torch.set_num_threads(1)
    x, y = load("train")
    x, y = x[rank::args.workers], y[rank::args.workers]
    if args.limit:
        x, y = x[:args.limit], y[:args.limit]
    torch.manual_seed(args.seed)  # the same start everywhere
    model = cnn()
    sent = None
    if mode == "ddp":
        torch.distributed.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{ports[0]}", rank=rank,
            world_size=args.workers)
        net = torch.nn.parallel.DistributedDataParallel(model)
    else:
        import reckon.torch
        net = model
        peer = reckon.torch.Peer(
            model, node_id=f"w{rank}", listen=f"127.0.0.1:{ports[rank]}",
            peers=[f"127.0.0.1:{p}" for p in ports], bootstrap=rank == 0,
            threshold=args.tau, quiesce_timeout_s=600)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    start = time.time()
    samples = 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1000 * epoch + rank))
        for b in range(0, len(x) - args.batch + 1, args.batch):
            i = order[b:b + args.batch]
            opt.zero_grad()
            loss = loss_fn(net(x[i]), y[i])
            loss.backward()
            opt.step()
            if mode == "reckon":
                peer.step(samples=len(i), loss=loss.item())
            samples += len(i)
    if mode == "reckon":
        peer.finish()
        sent = peer.bytes_sent
    else:
        torch.distributed.barrier()
    seconds = time.time() - start
    xt, yt = load("test")
    with torch.no_grad():
        accuracy = float((model(xt).argmax(1) == yt).float().mean())
    digest = float(sum(p.double().sum() for p in model.parameters()))
    results.put({"rank": rank, "samples": samples, "seconds": seconds, "accuracy": accuracy,
                 "sent": sent, "digest": digest})
    if mode == "ddp":
        torch.distributed.destroy_process_group()


def run(args, mode):
    ports = [free_port() for _ in range(args.workers)]
    results = mp.get_context("spawn").Queue()
    before = lo_bytes()
    procs = [mp.get_context("spawn").Process(target=train, args=(r, args, mode, ports, results))
             for r in range(args.workers)]
    for p in procs:
        p.start()
    got = [results.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    on_loopback = lo_bytes() - before
    got.sort(key=lambda r: r["rank"])
    params = sum(p.numel() for p in cnn().parameters())
    return {
        "run": mode, "workers": args.workers, "epochs": args.epochs, "params": params,
        "accuracy": got[0]["accuracy"],
        "accuracies": [r["accuracy"] for r in got],
        "replicas_identical": len({r["digest"] for r in got}) == 1,
        "samples_per_s": sum(r["samples"] for r in got) / max(r["seconds"] for r in got),
        "loopback_bytes": on_loopback,
        "reckon_bytes_sent": sum(r["sent"] for r in got) if mode == "reckon" else None,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--tau", type=float, default=0.001, help="reckon's threshold")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs", default="ddp,reckon")
    p.add_argument("--limit", type=int, default=0, help="samples per worker (0: its whole shard)")
    args = p.parse_args()
    for mode in args.runs.split(","):
        if mode not in ("ddp", "reckon"):
            sys.exit(f"--runs: '{mode}' is not ddp or reckon")
        print(json.dumps(run(args, mode)), flush=True)


if __name__ == "__main__":
    main()
