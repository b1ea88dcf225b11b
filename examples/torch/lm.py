#!/usr/bin/python3
"""A transformer language model trained by N processes four ways, with the
same seed, shards, recipe and token budget (issue 52):

  ddp        PyTorch DDP over gloo: gradients averaged every step.
  diloco     DiLoCo (Douillard et al. 2023): each process takes H inner
             AdamW steps on its shard, then the processes average their
             pseudo-gradients (start of the round minus where each got to,
             float32, all_reduce over gloo) and an outer Nesterov SGD (lr
             0.7, momentum 0.9) steps the shared weights. H is --diloco-h;
             `diloco` runs each H of that list.
  reckon     reckon.torch with Strom's fixed threshold on AdamW's change
             (--tau).
  reckon-lr  reckon.torch as the measurements say a transformer with AdamW
             wants it (docs/pytorch.md "Transformers and AdamW"): a
             threshold that follows the schedule, tau = k * lr each step
             (--tau-lr k), and each process stepping at lr / N
             (--reckon-lr-scale): every replica applies the sum of the N
             processes' steps, and AdamW's steps do not shrink as a
             gradient averaged over N would.
  reckon-local  an experiment (not in the default runs): reckon-lr where
             each process trains on its own view, the replica plus its
             residual, with the peers' updates added (LocalView).

The model: a byte-level decoder-only transformer (pre-norm, learned
positions, GELU MLP; --d-model, --layers, --heads, --context), AdamW with
linear warm-up and cosine decay to a tenth, decay on matrices only. The
text: WordNet's glosses (Debian's wordnet-base, "word: gloss" a line,
10.3 MB); every 20th gloss held out for the validation loss, the rest cut
into N contiguous shards, one a process. Process 0 measures the validation
loss every --eval-every steps, off the clock.

    examples/torch/lm.py [--workers 4] [--steps 300] [--runs ddp,diloco,reckon,reckon-lr]
                         [--links loopback,rate=100mbit,delay=10ms] [--autocast bf16]
                         [--out runs.jsonl]

Prints one JSON object a run (and appends it to --out): its curve (step,
tokens, seconds, bytes on the network, validation loss), the final
validation loss, the bytes, bits sent per parameter per step, and whether
the replicas ended identical. A link other than `loopback` runs each
process in a network namespace of its own behind that shape (root,
`reckonctl lab`; --reckonctl); the bytes are then what each namespace's
link sent, else loopback's counter. examples/torch/plot_lm.py draws the
runs and writes docs/benchmarks.md's table. Needs Debian's python3 with
python3-torch and the reckon package (or PYTHONPATH=build/python).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from launch import Lab, free_port, interface_of, lo_bytes, sent_bytes_of

WORDNET = "/usr/share/wordnet"
HELD_OUT_EVERY = 20  # every 20th gloss is validation text


def corpus(root=WORDNET):
    """(train bytes, validation bytes) as uint8 arrays: "word: gloss" lines
    of WordNet's four data files, in file order."""
    train, val = [], []
    index = 0
    for pos in ("noun", "verb", "adj", "adv"):
        path = os.path.join(root, f"data.{pos}")
        if not os.path.exists(path):
            sys.exit(f"lm.py: {path} is missing: install Debian's wordnet-base "
                     "(deploy/install-deps.sh)")
        with open(path, encoding="latin-1") as f:
            for line in f:
                if line.startswith("  "):  # the licence header
                    continue
                head, _, gloss = line.partition(" | ")
                word = head.split()[4].replace("_", " ")
                (val if index % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else train).append(
                    f"{word}: {gloss.strip()}\n")
                index += 1
    as_bytes = lambda lines: np.frombuffer("".join(lines).encode("utf-8"), dtype=np.uint8)
    return as_bytes(train), as_bytes(val)


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = (att + mask[:t, :t]).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class LM(torch.nn.Module):
    """Byte-level decoder-only transformer (GPT-2's layout, untied head)."""

    def __init__(self, d_model, layers, heads, context):
        super().__init__()
        self.embed = torch.nn.Embedding(256, d_model)
        self.position = torch.nn.Embedding(context, d_model)
        self.blocks = torch.nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d_model)
        self.head = torch.nn.Linear(d_model, 256, bias=False)
        # Added to the attention scores: -inf above the diagonal (a float
        # buffer: DDP broadcasts buffers, and gloo has no bool).
        self.register_buffer("mask", torch.full((context, context), float("-inf")).triu(1),
                             persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # GPT-2's: N(0, 0.02), the residual projections scaled down.
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight",
                                                                      "down.weight")) else 0.02
                torch.nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position.weight[:tokens.shape[1]]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln(x))


def model_of(args):
    return LM(args.d_model, args.layers, args.heads, args.context)


def batch_of(data, generator, batch, context):
    """`batch` windows of context+1 bytes at random offsets: inputs, targets."""
    starts = torch.randint(0, len(data) - context - 1, (batch,), generator=generator)
    rows = torch.stack([torch.from_numpy(data[s:s + context + 1].astype(np.int64))
                        for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]


def validation_windows(val, count, context):
    """The same `count` windows for every run: evenly spaced."""
    step = (len(val) - context - 1) // count
    rows = torch.stack([torch.from_numpy(val[i * step:i * step + context + 1].astype(np.int64))
                        for i in range(count)])
    return rows[:, :-1], rows[:, 1:]


def lr_at(step, args):
    """Linear warm-up to --lr over --warmup steps, then cosine to a tenth."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress))))


def adamw(model, args):
    """AdamW, decay on the matrices only (not on norms, biases)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": rest, "weight_decay": 0.0}],
                             lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


def loss_of(model, x, y, autocast):
    if autocast:
        with torch.autocast("cpu" if x.device.type == "cpu" else "cuda", dtype=torch.bfloat16):
            logits = model(x)
    else:
        logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))


@torch.no_grad()
def validation_loss(model, windows, autocast):
    model.eval()
    x, y = windows
    losses = [float(loss_of(model, x[i:i + 16], y[i:i + 16], autocast))
              for i in range(0, len(x), 16)]
    model.train()
    return sum(losses) / len(losses)


class LocalView:
    """reckon-local (an experiment, emulated around reckon.torch): the
    process keeps training on its own parameters, replica + its residual,
    instead of being set back to the replica each step; what the peers
    sent is added to them. The replicas are reckon's as ever. The residual
    is this process's (params - replica); fed to the peer so that its own
    residual stays equal to it."""

    def __init__(self, peer):
        self.peer = peer
        self.flat = peer._flat
        self.replica = self.flat.clone()
        self.gap = torch.zeros_like(self.flat)

    @torch.no_grad()
    def step(self, samples, loss):
        params = self.flat.clone()
        pending = params - self.replica
        self.flat.copy_(params - self.gap)
        self.peer.step(samples=samples, loss=loss)
        tau = self.peer.threshold
        sent = torch.where(pending.abs() >= tau, pending.sign() * tau, torch.zeros_like(pending))
        self.gap = pending - sent
        self.replica = self.flat.clone()
        self.flat.add_(self.gap)


def train(rank, args):
    """One process of a run (--child): trains its shard, prints its result
    as one JSON line."""
    torch.set_num_threads(args.threads)
    train_bytes, val_bytes = corpus()
    shard = np.array_split(train_bytes, args.workers)[rank]
    windows = validation_windows(val_bytes, args.val_windows, args.context)
    torch.manual_seed(args.seed)  # the same start everywhere
    model = model_of(args)
    params = sum(p.numel() for p in model.parameters())
    address = args.addresses.split(",")
    host = address[rank].rsplit(":", 1)[0]
    in_lab = host != "127.0.0.1"
    net, peer = model, None
    # reckon-lr: each process's AdamW at lr / N (see the docstring).
    lr_scale = 1.0
    if args.mode in ("reckon-lr", "reckon-local"):
        lr_scale = args.reckon_lr_scale if args.reckon_lr_scale > 0 else 1.0 / args.workers
    if args.mode in ("ddp", "diloco"):
        if in_lab:
            os.environ["GLOO_SOCKET_IFNAME"] = interface_of(host)
        torch.distributed.init_process_group(
            "gloo", init_method=f"tcp://{address[0]}", rank=rank, world_size=args.workers)
        if args.mode == "ddp":
            net = torch.nn.parallel.DistributedDataParallel(model)
    else:
        import reckon.torch
        peer = reckon.torch.Peer(
            model, node_id=f"w{rank}", listen=address[rank], peers=address,
            bootstrap=rank == 0, threshold=args.tau if args.mode == "reckon" else
            args.tau_lr * lr_at(0, args) * lr_scale, heartbeat_ms=args.heartbeat_ms,
            quiesce_timeout_s=1800)
    opt = adamw(model, args)
    if args.mode == "reckon-local":
        local = LocalView(peer)
    if args.mode == "diloco":
        # The shared weights and the outer optimizer (the paper's: Nesterov
        # SGD, lr 0.7, momentum 0.9), the same on every process.
        shared = [p.detach().clone() for p in model.parameters()]
        for s in shared:
            s.requires_grad_(True)
        outer = torch.optim.SGD(shared, lr=args.outer_lr, momentum=0.9, nesterov=True)
    generator = torch.Generator().manual_seed(args.seed * 1000 + rank)
    tokens_per_step = args.workers * args.batch * args.context
    sent = (lambda: sent_bytes_of(host)) if in_lab else lo_bytes
    start_bytes = sent()
    curve = []
    off_clock = 0.0
    start = time.time()
    next_eval = 0

    def record(step, loss_model):
        """A point of the curve at `step` (process 0 measures the loss),
        its time off the clock."""
        nonlocal off_clock
        t0 = time.time()
        point = {"step": step, "tokens": step * tokens_per_step,
                 "seconds": t0 - start - off_clock, "bytes": sent() - start_bytes}
        if rank == 0:
            point["val_loss"] = validation_loss(loss_model, windows, args.autocast)
        curve.append(point)
        off_clock += time.time() - t0

    train_loss = 0.0
    for step in range(args.steps):
        if step >= next_eval and (args.mode != "diloco" or step % args.inner_steps == 0):
            record(step, model)
            next_eval += args.eval_every
        lr = lr_at(step, args) * lr_scale
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = batch_of(shard, generator, args.batch, args.context)
        opt.zero_grad(set_to_none=True)
        loss = loss_of(net, x, y, args.autocast)
        loss.backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        train_loss = float(loss)
        if peer is not None:
            if args.mode in ("reckon-lr", "reckon-local"):
                peer.threshold = args.tau_lr * lr
            if args.mode == "reckon-local":
                local.step(args.batch, train_loss)
            else:
                peer.step(samples=args.batch, loss=train_loss)
        if args.mode == "diloco" and (step + 1) % args.inner_steps == 0:
            with torch.no_grad():
                for s, p in zip(shared, model.parameters()):
                    s.grad = s - p  # this process's pseudo-gradient
                    torch.distributed.all_reduce(s.grad)
                    s.grad /= args.workers
                outer.step()
                for s, p in zip(shared, model.parameters()):
                    p.copy_(s)
    if peer is not None:
        peer.finish()  # every replica the same
    else:
        torch.distributed.barrier()
    record(args.steps, model)
    digest = float(sum(p.double().sum() for p in model.parameters()))
    if args.mode in ("ddp", "diloco"):
        torch.distributed.destroy_process_group()
    print(json.dumps({"rank": rank, "curve": curve, "params": params, "digest": digest,
                      "train_loss": train_loss,
                      "reckon_bytes_sent": peer.bytes_sent if peer else None,
                      "updates_sent": peer.updates_sent if peer else None}), flush=True)


def machine():
    """This machine in words: its CPU model and cores."""
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cores"


def run(args, mode, h, link, lab):
    """One run: N child processes (in the lab's namespaces off loopback);
    its row."""
    if lab:
        addresses = [f"{ip}:{7070 if mode.startswith('reckon') else 29500}"
                     for ip in lab.description["ip"]]
        prefixes = lab.description["exec"]
        before = lab.forwarded_bytes()
    else:
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(args.workers)]
        prefixes = [[] for _ in range(args.workers)]
        before = lo_bytes()
    passed = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
              if k in CHILD_FLAGS]
    procs = [subprocess.Popen(prefixes[r] + [sys.executable, os.path.abspath(__file__),
                                             f"--child={r}", f"--mode={mode}", f"--inner-steps={h}",
                                             f"--addresses={','.join(addresses)}"] + passed,
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ))
             for r in range(args.workers)]
    got = []
    for r, p in enumerate(procs):
        out, _ = p.communicate(timeout=6 * 3600)
        if p.returncode != 0:
            raise RuntimeError(f"{mode} process {r} exited {p.returncode}")
        got.append(json.loads(out.strip().splitlines()[-1]))
    on_network = (lab.forwarded_bytes() if lab else lo_bytes()) - before
    curve = got[0]["curve"]
    if lab:
        # Each process counted what its own link sent; the cluster's bytes
        # at a point are their sum at the same step.
        for i, point in enumerate(curve):
            point["bytes"] = sum(g["curve"][i]["bytes"] for g in got)
    params = got[0]["params"]
    steps = args.steps
    return {
        "run": mode if mode != "diloco" else f"diloco-h{h}", "mode": mode, "h": h,
        "link": link, "workers": args.workers, "params": params, "steps": steps,
        "tokens": steps * args.workers * args.batch * args.context,
        "model": {"d_model": args.d_model, "layers": args.layers, "heads": args.heads,
                  "context": args.context},
        "batch": args.batch, "lr": args.lr, "tau": args.tau if mode == "reckon" else None,
        "tau_lr": args.tau_lr if mode in ("reckon-lr", "reckon-local") else None,
        "lr_scale": ((args.reckon_lr_scale or 1.0 / args.workers)
                     if mode in ("reckon-lr", "reckon-local") else 1.0),
        "autocast": args.autocast or "off", "seed": args.seed,
        "final_val_loss": curve[-1]["val_loss"], "seconds": curve[-1]["seconds"],
        "tokens_per_s": steps * args.workers * args.batch * args.context / curve[-1]["seconds"],
        "network_bytes": on_network,
        # What each process sent per parameter per step, framing included.
        "bits_per_param_step": on_network * 8 / (args.workers * params * steps),
        "replicas_identical": len({g["digest"] for g in got}) == 1,
        "reckon_bytes_sent": (sum(g["reckon_bytes_sent"] for g in got)
                              if mode.startswith("reckon") else None),
        "updates_sent": (sum(g["updates_sent"] for g in got)
                         if mode.startswith("reckon") else None),
        "curve": curve,
        "date": time.strftime("%Y-%m-%d"), "machine": machine(),
    }


CHILD_FLAGS = ("workers", "steps", "batch", "context", "d_model", "layers", "heads", "lr",
               "warmup", "weight_decay", "clip", "tau", "tau_lr", "reckon_lr_scale",
               "outer_lr", "seed", "eval_every", "val_windows", "heartbeat_ms", "threads",
               "autocast")
MODES = ("ddp", "diloco", "reckon", "reckon-lr", "reckon-local")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=300, help="steps of each process")
    p.add_argument("--batch", type=int, default=16, help="sequences a process a step")
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW's peak learning rate")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="gradient norm clip (0: none)")
    p.add_argument("--tau", type=float, default=1e-3, help="reckon's fixed threshold")
    p.add_argument("--tau-lr", type=float, default=4.0,
                   help="reckon-lr's threshold as a multiple of the learning rate")
    p.add_argument("--reckon-lr-scale", type=float, default=0,
                   help="reckon-lr's learning rate as a multiple of --lr (0: 1/workers)")
    p.add_argument("--diloco-h", default="10,50", help="DiLoCo's inner steps, one run each")
    p.add_argument("--outer-lr", type=float, default=0.7, help="DiLoCo's outer learning rate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--val-windows", type=int, default=64)
    p.add_argument("--heartbeat-ms", type=int, default=100)
    p.add_argument("--threads", type=int, default=1, help="torch threads a process")
    p.add_argument("--autocast", default="", choices=("", "bf16"),
                   help="bf16: forward passes under torch.autocast, float32 parameters")
    p.add_argument("--runs", default=",".join(MODES[:4]))
    p.add_argument("--links", default="loopback",
                   help="links separated by ';', each `loopback` or a `reckonctl lab` shape "
                        "such as rate=100mbit,delay=10ms (root)")
    p.add_argument("--out", default="", help="append each run's JSON line to this file")
    p.add_argument("--reckonctl", default=os.environ.get("RECKONCTL", "reckonctl"))
    p.add_argument("--child", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--mode", default="", help=argparse.SUPPRESS)
    p.add_argument("--inner-steps", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--addresses", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child >= 0:
        train(args.child, args)
        return
    runs = args.runs.split(",")
    for mode in runs:
        if mode not in MODES:
            sys.exit(f"--runs: '{mode}' is not one of {', '.join(MODES)}")
    hs = [int(h) for h in args.diloco_h.split(",")]
    for h in hs:
        if h < 1 or args.steps % h:
            sys.exit(f"--diloco-h: {h} does not divide --steps {args.steps}")
    for link in args.links.split(";"):
        lab = Lab(args.reckonctl, args.workers, link) if link != "loopback" else None
        try:
            for mode in runs:
                for h in (hs if mode == "diloco" else [0]):
                    row = run(args, mode, h, link, lab)
                    print(json.dumps(row), flush=True)
                    if args.out:
                        with open(args.out, "a") as f:
                            f.write(json.dumps(row) + "\n")
        finally:
            if lab:
                lab.close()


if __name__ == "__main__":
    main()
