#!/usr/bin/python3
"""Draws examples/torch/lm.py's runs and prints their table (issue 52).

    examples/torch/plot_lm.py RUNS.jsonl [--png docs/lm.png] [--table]

The picture: one row of panels a link (loopback, each lab shape), three
panels a row: validation loss against tokens, against wall-clock seconds,
and against bytes on the network (log scale). The table (Markdown, on
stdout with --table): each run's final validation loss and its ratio to
DDP's on the same link, seconds, tokens/s, bytes, DDP's bytes over the
run's, bits sent per parameter per step, and the seconds the run took to
reach DDP's final loss (interpolated on its curve; "-" when it never did),
and the seconds DDP took to reach the run's final loss.
Needs python3-matplotlib for the picture.
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def label(row):
    name = row["run"]
    if row.get("autocast", "off") != "off":
        name += f" ({row['autocast']})"
    return name


def seconds_to_reach(curve, loss):
    """The time at which the curve first reached `loss` (linear between
    points), or None."""
    previous = None
    for point in curve:
        if point.get("val_loss") is None:
            continue
        if point["val_loss"] <= loss:
            if previous is None:
                return point["seconds"]
            (s0, l0), (s1, l1) = previous, (point["seconds"], point["val_loss"])
            return s0 + (s1 - s0) * (l0 - loss) / (l0 - l1) if l0 != l1 else s1
        previous = (point["seconds"], point["val_loss"])
    return None


def table(rows):
    out = ["| link | run | final val loss | vs DDP | seconds | tokens/s | network bytes | "
           "DDP's bytes / run's | bits / param / step | to DDP's final loss | "
           "DDP to this loss |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        ddp = next((r for r in rows if r["link"] == row["link"] and r["run"] == "ddp"
                    and r.get("autocast") == row.get("autocast")), None)
        versus = f"{row['final_val_loss'] / ddp['final_val_loss']:.3f}x" if ddp else "-"
        saved = f"{ddp['network_bytes'] / row['network_bytes']:.0f}x" if ddp else "-"
        reach = seconds_to_reach(row["curve"], ddp["final_val_loss"]) if ddp else None
        ddp_reach = seconds_to_reach(ddp["curve"], row["final_val_loss"]) if ddp else None
        out.append(
            f"| {row['link']} | {label(row)} | {row['final_val_loss']:.4f} | {versus} | "
            f"{row['seconds']:.0f} | {row['tokens_per_s']:.0f} | {row['network_bytes']:,} | "
            f"{saved} | {row['bits_per_param_step']:.4f} | "
            f"{'-' if reach is None else f'{reach:.0f} s'} | "
            f"{'-' if ddp_reach is None else f'{ddp_reach:.0f} s'} |")
    return "\n".join(out)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    links = list(dict.fromkeys(r["link"] for r in rows))
    fig, axes = plt.subplots(len(links), 3, figsize=(15, 4 * len(links)), squeeze=False)
    for i, link in enumerate(links):
        for row in (r for r in rows if r["link"] == link):
            points = [p for p in row["curve"] if p.get("val_loss") is not None]
            loss = [p["val_loss"] for p in points]
            axes[i][0].plot([p["tokens"] for p in points], loss, label=label(row))
            axes[i][1].plot([p["seconds"] for p in points], loss, label=label(row))
            axes[i][2].plot([max(1, p["bytes"]) for p in points], loss, label=label(row))
        for j, x in enumerate(("tokens", "wall-clock seconds", "bytes on the network")):
            axes[i][j].set_xlabel(x)
            axes[i][j].set_ylabel("validation loss (nats/byte)")
            axes[i][j].set_title(link)
            axes[i][j].grid(alpha=0.3)
        axes[i][2].set_xscale("log")
        axes[i][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", help="lm.py's JSON lines")
    p.add_argument("--png", default="", help="write the picture here")
    p.add_argument("--table", action="store_true", help="print the Markdown table")
    args = p.parse_args()
    rows = load(args.runs)
    if not rows:
        sys.exit(f"{args.runs}: no runs")
    if args.png:
        plot(rows, args.png)
    if args.table or not args.png:
        print(table(rows))


if __name__ == "__main__":
    main()
