"""How large AdamW's steps are, tensor by tensor, on examples/torch/lm.py's
transformer (issue 52: does reckon need a threshold per tensor?). One
process trains --steps steps of lm.py's recipe and prints, for each tensor,
the mean and median of |change| / lr over the last --window steps and the
share of elements whose change passed half the learning rate.

    /usr/bin/python3 tests/bench/adamw_step_sizes.py [--steps 60] [--window 20]

Figures: docs/pytorch.md "Transformers and AdamW"."""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "torch"))
import lm  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--window", type=int, default=20)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--weight-decay", type=float, default=0.1)
    args = p.parse_args()
    torch.set_num_threads(1)
    train, _ = lm.corpus()
    torch.manual_seed(0)
    model = lm.model_of(args)
    opt = lm.adamw(model, args)
    generator = torch.Generator().manual_seed(0)
    sums = {}
    for step in range(args.steps):
        lr = lm.lr_at(step, args)
        for group in opt.param_groups:
            group["lr"] = lr
        before = [p.detach().clone() for p in model.parameters()]
        x, y = lm.batch_of(train, generator, args.batch, args.context)
        opt.zero_grad(set_to_none=True)
        lm.loss_of(model, x, y, False).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step < args.steps - args.window:
            continue
        for (name, p), b in zip(model.named_parameters(), before):
            ratio = (p.detach() - b).abs() / lr
            s = sums.setdefault(name, [0.0, 0.0, 0.0])
            s[0] += float(ratio.mean()) / args.window
            s[1] += float(ratio.median()) / args.window
            s[2] += float((ratio > 0.5).float().mean()) / args.window
    print(f"{'tensor':28s} {'mean':>6s} {'median':>6s} {'>lr/2':>6s}   (|change| / lr)")
    for name, (mean, median, over) in sums.items():
        print(f"{name:28s} {mean:6.3f} {median:6.3f} {over:6.3f}")
    means = [s[0] for s in sums.values()]
    print(f"means from {min(means):.3f} to {max(means):.3f} ({max(means) / min(means):.1f}x)")


if __name__ == "__main__":
    main()
