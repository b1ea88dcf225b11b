#!/usr/bin/python3
"""What reckon.torch's peer.step() costs beside torch's own step (issue 36):
one process, one peer (a cluster of one: what it publishes goes nowhere, so
this is the peer's local work: the difference, the threshold pass, the
encoding, the applies, the write back), on --device, synthetic batches:
either an MLP of about --params parameters with SGD, or (--model lm) the
byte-level transformer of examples/torch/lm.py with AdamW, --lm-shapes
D_MODEL:LAYERS each, optionally with its forward pass under
torch.autocast (--autocast bf16). Per size, side by side in one
run: the median milliseconds of torch's step (forward, backward, SGD) on
one copy of the model alone, and of torch's step followed by peer.step()
on another, in alternating blocks of 10 steps (so that drift on a shared
machine falls on both), and their ratio. On a GPU each timed step ends
with torch.cuda.synchronize(). Prints one JSON line per size.

    tests/bench/torch_step_cost.py [--device cpu|cuda] [--params 1e6,1e7]
                                   [--steps 50] [--batch 256] [--tau 0.001]
    tests/bench/torch_step_cost.py --model lm [--lm-shapes 256:4,512:8]
                                   [--autocast bf16] [--batch 16] [--context 128]

Needs python3 with torch and the reckon package (PYTHONPATH=build/python).
Figures: docs/pytorch.md "What a step costs".
"""
import argparse
import json
import os
import socket
import sys
import time

import torch

import reckon
import reckon.torch


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlp(params, device):
    """784-h-h-10 with h chosen for about `params` parameters."""
    # 784h + h + h*h + h + 10h + 10 = h^2 + 796h + 10
    h = int((-796 + (796 ** 2 + 4 * (params - 10)) ** 0.5) / 2)
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(784, h), torch.nn.ReLU(), torch.nn.Linear(h, h),
                               torch.nn.ReLU(), torch.nn.Linear(h, 10)).to(device)


def lm_module():
    """examples/torch/lm.py, from the repository or beside this script (the
    device run's pack puts it there)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (here, os.path.join(here, "..", "..", "examples", "torch")):
        if os.path.exists(os.path.join(d, "lm.py")):
            sys.path.insert(0, d)
            import lm
            return lm
    raise SystemExit("torch_step_cost.py: examples/torch/lm.py not found")


def lm_model(shape, args, device):
    """lm.py's transformer, D_MODEL:LAYERS (heads: D_MODEL / 64), and its
    AdamW with decay on the matrices."""
    lm = lm_module()
    d, layers = (int(v) for v in shape.split(":"))
    torch.manual_seed(0)
    model = lm.LM(d, layers, max(1, d // 64), args.context).to(device)
    opt_args = argparse.Namespace(lr=3e-4, weight_decay=0.1)
    return model, lm.adamw(model, opt_args)


def timed_steps(model, opt, x, y, steps, after, sync, autocast=False):
    """Each step's seconds."""
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        if autocast:
            with torch.autocast(x.device.type, dtype=torch.bfloat16):
                logits = model(x)
        else:
            logits = model(x)
        torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                          y.reshape(-1)).backward()
        opt.step()
        after()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def measure(size, args):
    """size: the MLP's parameter count, or the LM's D_MODEL:LAYERS."""
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(1)
    if args.model == "lm":
        x = torch.randint(0, 256, (args.batch, args.context + 1), generator=g)
        x, y = x[:, :-1].to(device), x[:, 1:].to(device)
        plain, plain_opt = lm_model(size, args, device)
        model, opt = lm_model(size, args, device)
    else:
        x = torch.randn(args.batch, 784, generator=g).to(device)
        y = torch.randint(0, 10, (args.batch,), generator=g).to(device)
        plain = mlp(int(float(size)), device)
        plain_opt = torch.optim.SGD(plain.parameters(), lr=0.05)
        model = mlp(int(float(size)), device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
    autocast = args.autocast == "bf16"
    peer = reckon.torch.Peer(model, node_id="bench", listen=f"127.0.0.1:{free_port()}",
                             bootstrap=True, threshold=args.tau, handle_sigterm=False)
    timed_steps(plain, plain_opt, x, y, 2, lambda: None, sync, autocast)  # warm-up
    timed_steps(model, opt, x, y, 2, peer.step, sync, autocast)
    alone, with_peer = [], []
    for _ in range(max(1, args.steps // 10)):
        alone += timed_steps(plain, plain_opt, x, y, 10, lambda: None, sync, autocast)
        with_peer += timed_steps(model, opt, x, y, 10, peer.step, sync, autocast)
    alone, with_peer = median(alone), median(with_peer)
    n = sum(p.numel() for p in model.parameters())
    return {"device": str(peer.device), "model": args.model if args.model == "mlp" else f"lm {size}",
            "autocast": args.autocast or "off", "params": n, "batch": args.batch,
            "steps": 10 * max(1, args.steps // 10),
            "torch_step_ms": round(alone * 1e3, 3), "with_peer_ms": round(with_peer * 1e3, 3),
            "peer_ms": round((with_peer - alone) * 1e3, 3), "ratio": round(with_peer / alone, 3),
            "updates_per_step": peer.updates_sent / peer.steps}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--params", default="1e6,1e7")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--tau", type=float, default=0.001)
    p.add_argument("--model", default="mlp", choices=("mlp", "lm"))
    p.add_argument("--lm-shapes", default="256:4", help="--model lm: D_MODEL:LAYERS, comma-separated")
    p.add_argument("--context", type=int, default=128, help="--model lm: tokens a sequence")
    p.add_argument("--autocast", default="", choices=("", "bf16"),
                   help="bf16: forward passes under torch.autocast, float32 parameters")
    args = p.parse_args()
    if args.device.startswith("cuda") and not reckon.built_with_cuda:
        raise SystemExit("this reckon was built without CUDA")
    for size in (args.lm_shapes if args.model == "lm" else args.params).split(","):
        print(json.dumps(measure(size, args)), flush=True)


if __name__ == "__main__":
    main()
