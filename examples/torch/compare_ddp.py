#!/usr/bin/python3
"""reckon against PyTorch DDP on the same small CNN (issue 36): N processes
on this machine, Fashion-MNIST (Debian's dataset-fashion-mnist) in N
disjoint shards, the same seed, model, batch, learning rate and epochs;
once with DDP over gloo (gradients averaged every step), once with
reckon.torch (each step's change published as +-tau updates). Prints one
JSON line per run: test accuracy, samples/s of the whole cluster, and the
bytes that went over the network meanwhile, beside what each process says
it sent.

On loopback (the default) the bytes are loopback's counters
(/sys/class/net/lo), so nothing else should use loopback during a run.
With --link SHAPE (root: `reckonctl lab`, ctl/net_lab.h) every process
runs in a network namespace of its own behind a link of that shape, e.g.
`rate=100mbit,delay=1ms` each way, and the bytes are what the lab's switch
forwarded.

    examples/torch/compare_ddp.py [--workers 4] [--epochs 1] [--runs ddp,reckon]
                                  [--link rate=100mbit,delay=1ms [--reckonctl PATH]]

Needs Debian's python3 with python3-torch and the reckon package (the
README's main set-up command installs it; or PYTHONPATH=build/python).
Figures: docs/benchmarks.md "reckon against DDP".
"""
import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import numpy as np
import torch

from launch import Lab, free_port, interface_of, lo_bytes

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


def cnn(name):
    """`tiny`: 18,378 parameters; `small`: 184,586 (LeNet's shape: two
    convolutions, then a hidden layer of 128)."""
    if name == "tiny":
        return torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, 10))
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 4 * 4, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))


def train(rank, args):
    """One process of a run (--child): trains its shard, prints its result
    as one JSON line."""
    torch.set_num_threads(1)
    x, y = load("train")
    x, y = x[rank::args.workers], y[rank::args.workers]
    if args.limit:
        x, y = x[:args.limit], y[:args.limit]
    torch.manual_seed(args.seed)  # the same start everywhere
    model = cnn(args.model)
    sent = None
    addresses = args.addresses.split(",")
    if args.mode == "ddp":
        host = addresses[rank].rsplit(":", 1)[0]
        if host != "127.0.0.1":
            # In the lab: gloo talks over this namespace's one interface.
            os.environ["GLOO_SOCKET_IFNAME"] = interface_of(host)
        torch.distributed.init_process_group(
            "gloo", init_method=f"tcp://{addresses[0]}", rank=rank, world_size=args.workers)
        net = torch.nn.parallel.DistributedDataParallel(model)
    else:
        import reckon.torch
        net = model
        host = addresses[rank].rsplit(":", 1)[0]
        metrics = f"{host}:{free_port() if host == '127.0.0.1' else 9100}"
        peer = reckon.torch.Peer(
            model, node_id=f"w{rank}", listen=addresses[rank], peers=addresses,
            bootstrap=rank == 0, threshold=args.tau, heartbeat_ms=args.heartbeat_ms,
            quiesce_timeout_s=600, http_listen=metrics)
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
            if args.mode == "reckon":
                peer.step(samples=len(i), loss=loss.item())
            samples += len(i)
    frames = replayed = None
    if args.mode == "reckon":
        peer.finish()
        sent = peer.bytes_sent
        # Every gossip frame this peer sent (serialized: its updates to each
        # peer, heartbeats, relays), from its own /metrics.
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as r:
            text = r.read().decode()
        frames = sum(float(v) for v in re.findall(
            r"^reckon_gossip_sent_bytes_total(?:\{[^}]*\})? (\S+)$", text, re.M))
        # Joined from the initial weights with the cut sent by the logs, not
        # a snapshot (docs/protocol.md section 5).
        replayed = sum(float(v) for v in re.findall(
            r"^reckon_joins_by_replay_total(?:\{[^}]*\})? (\S+)$", text, re.M))
    else:
        torch.distributed.barrier()
    seconds = time.time() - start
    xt, yt = load("test")
    if args.eval_samples:
        xt, yt = xt[:args.eval_samples], yt[:args.eval_samples]
    with torch.no_grad():
        accuracy = float((model(xt).argmax(1) == yt).float().mean())
    digest = float(sum(p.double().sum() for p in model.parameters()))
    if args.mode == "ddp":
        torch.distributed.destroy_process_group()
    print(json.dumps({"rank": rank, "samples": samples, "seconds": seconds, "accuracy": accuracy,
                      "eval_samples": len(yt), "sent": sent, "frames": frames, "replayed": replayed,
                      "digest": digest}), flush=True)


def run(args, mode, lab):
    """One run: N child processes (in the lab's namespaces with --link)."""
    if lab:
        ips = lab.description["ip"]
        addresses = [f"{ip}:{7070 if mode == 'reckon' else 29500}" for ip in ips]
        prefixes = lab.description["exec"]
        before = lab.forwarded_bytes()
    else:
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(args.workers)]
        prefixes = [[] for _ in range(args.workers)]
        before = lo_bytes()
    common = [f"--{k}={v}" for k, v in (("workers", args.workers), ("epochs", args.epochs),
                                         ("batch", args.batch), ("lr", args.lr),
                                         ("momentum", args.momentum), ("tau", args.tau),
                                         ("seed", args.seed), ("limit", args.limit),
                                         ("heartbeat-ms", args.heartbeat_ms), ("model", args.model),
                                         ("eval-samples", args.eval_samples))]
    procs = [subprocess.Popen(prefixes[r] + [sys.executable, os.path.abspath(__file__),
                                             f"--child={r}", f"--mode={mode}",
                                             f"--addresses={','.join(addresses)}"] + common,
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ))
             for r in range(args.workers)]
    got = []
    for r, p in enumerate(procs):
        out, _ = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"{mode} process {r} exited {p.returncode}")
        got.append(json.loads(out.strip().splitlines()[-1]))
    on_network = (lab.forwarded_bytes() if lab else lo_bytes()) - before
    params = sum(p.numel() for p in cnn(args.model).parameters())
    return {
        "run": mode, "model": args.model, "workers": args.workers, "epochs": args.epochs, "params": params,
        "link": args.link or "loopback",
        "accuracy": got[0]["accuracy"],
        "accuracies": [r["accuracy"] for r in got],
        "eval_samples": got[0]["eval_samples"],
        "replicas_identical": len({r["digest"] for r in got}) == 1,
        "samples_per_s": sum(r["samples"] for r in got) / max(r["seconds"] for r in got),
        "network_bytes": on_network,
        "reckon_bytes_sent": sum(r["sent"] for r in got) if mode == "reckon" else None,
        "reckon_gossip_frame_bytes": sum(r["frames"] for r in got) if mode == "reckon" else None,
        "reckon_joins_by_replay": sum(r["replayed"] for r in got) if mode == "reckon" else None,
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
    p.add_argument("--heartbeat-ms", type=int, default=100,
                   help="reckon's heartbeat on each peer stream (failure detection)")
    p.add_argument("--model", default="tiny", choices=("tiny", "small"),
                   help="the CNN: tiny (18,378 parameters) or small (184,586)")
    p.add_argument("--runs", default="ddp,reckon")
    p.add_argument("--limit", type=int, default=0, help="samples per worker (0: its whole shard)")
    p.add_argument("--eval-samples", type=int, default=0,
                   help="test samples the accuracy is measured on, the test set's first N "
                        "(0: all 10,000; one process's pass over them is about 15 s of CPU for "
                        "the small CNN)")
    p.add_argument("--link", default="",
                   help="a link shape for `reckonctl lab` (root), e.g. rate=100mbit,delay=1ms; "
                        "empty: loopback")
    p.add_argument("--reckonctl", default=os.environ.get("RECKONCTL", "reckonctl"),
                   help="the reckonctl that runs the lab (default $RECKONCTL, else on PATH)")
    p.add_argument("--child", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--mode", default="", help=argparse.SUPPRESS)
    p.add_argument("--addresses", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.eval_samples < 0:
        p.error(f"--eval-samples {args.eval_samples}: a count of test samples, 0 for all")
    if args.child >= 0:
        train(args.child, args)
        return
    runs = args.runs.split(",")
    for mode in runs:
        if mode not in ("ddp", "reckon"):
            sys.exit(f"--runs: '{mode}' is not ddp or reckon")
    lab = Lab(args.reckonctl, args.workers, args.link) if args.link else None
    try:
        for mode in runs:
            print(json.dumps(run(args, mode, lab)), flush=True)
    finally:
        if lab:
            lab.close()


if __name__ == "__main__":
    main()
