#!/usr/bin/env python3
"""The scaling model of docs/scaling.md: what a full-mesh reckon cluster of N
nodes does per minibatch, from a few measured inputs, and where it stops
scaling.

Per node and minibatch (one step, one message of M bytes, u = 8M / bits per
update +-tau updates, out; N-1 such in):
  training thread  t_c + (N-1) u / gpu_apply      the GPU step, then the
                   peers' messages applied to the training replica (between
                   steps: not overlapped until issue 16's double buffering)
  node thread      (N-1) u (1/decode + 1/mirror_apply)   each peer message
                   decoded and applied to the node's mirror (CPU, one
                   thread, overlapped with the training thread)
  link             (N-1) M / (link - heartbeats), each way: every message to
                   every peer, and in from every peer (overlapped)
  heartbeats       hz x S(N) x H(N) bytes/s, H(N) = h0 + h1 x N (measured);
                   S(N) = N-1 streams beat every interval in the mesh; in the
                   tree overlay (--overlay tree) only the ring neighbours do
                   (2^i apart either way), the others every 7th (failure
                   timeout 3 s / (4 x 100 ms))
Messages cost the same in both: N-1 copies of each, every node receiving
each once.
A step takes the longest of the three, so the speed-up over one node is
N x t_c / step and the efficiency t_c / step.

Checked against what the lab measured (docs/scaling.md): `--check` prints the
model beside the 100 Mbit/s runs and the synthetic members' bytes.

Usage: scaling_model.py [--nodes 10,80,1000] [--link-gbit 10] [--step-ms 3.8]
                        [--message-kb 69] [--batch 1024] [--overlay mesh|tree]
                        [--check]
"""
import argparse
import sys

# Heartbeat bytes H(N) = H0 + H1 x N, fitted to the synthetic members'
# measured bytes beyond their own messages at 8 and 32 nodes (15 and 202
# KB/s per node; docs/scaling.md): each heartbeat carries the version
# vector, and every tenth the member list.
H0, H1 = 68.0, 18.3
HEARTBEAT_HZ = 10.0

# Strom 2015, Table 2 (epochs 2-10, tau 4, 69 KB per minibatch): nodes ->
# relative speed.
STROM_TABLE_2 = {1: 1.0, 5: 4.3, 10: 8.7, 20: 17.0, 40: 33.0, 80: 54.0}


# Tree overlay: heartbeats to members that are not ring neighbours go every
# this many intervals (server/node.cc HeartbeatDue at the default timeouts).
TREE_SPARSE_EVERY = 7


def ring_neighbours(nodes):
    """Members 2^i apart from one node on a ring of `nodes`, either way."""
    offsets = set()
    step = 1
    while step < nodes:
        offsets.add(step % nodes)
        offsets.add((nodes - step) % nodes)
        step *= 2
    offsets.discard(0)
    return len(offsets)


def beating_streams(nodes, overlay="mesh"):
    """Heartbeats a node sends per interval."""
    if overlay == "mesh":
        return nodes - 1
    near = ring_neighbours(nodes)
    return near + (nodes - 1 - near) / TREE_SPARSE_EVERY


def heartbeat_bytes_per_s(nodes, overlay="mesh"):
    return HEARTBEAT_HZ * beating_streams(nodes, overlay) * (H0 + H1 * nodes)


class Rates:
    """Measured per-update rates (docs/benchmarks.md; issue 16's H100 run)."""
    bits_per_update = 12.5  # Rice at p = 1e-3
    decode_per_s = 4.85e8   # Rice decode, full validation, one CPU thread
    mirror_apply_per_s = 1.0e8  # CPU apply into the node's int64 mirror
    gpu_apply_per_s = 1.75e9    # batched apply on the H100 (issue 16)


def step(nodes, step_s, message_bytes, link_bytes_per_s, rates=Rates, overlay="mesh"):
    """(seconds per step, bottleneck) of one node in a cluster of `nodes`."""
    if nodes == 1:
        return step_s, "compute"
    spare = link_bytes_per_s - heartbeat_bytes_per_s(nodes, overlay)
    if spare <= 0:
        return float("inf"), "heartbeats fill the link"
    updates_in = (nodes - 1) * 8 * message_bytes / rates.bits_per_update
    parts = {
        "compute": step_s + updates_in / rates.gpu_apply_per_s,
        "node CPU": updates_in * (1 / rates.decode_per_s + 1 / rates.mirror_apply_per_s),
        "link": (nodes - 1) * message_bytes / spare,
    }
    bound = max(parts, key=parts.get)
    return parts[bound], bound


def row(nodes, step_s, message_bytes, link_bytes_per_s, batch, overlay="mesh"):
    seconds, bottleneck = step(nodes, step_s, message_bytes, link_bytes_per_s, overlay=overlay)
    speedup = nodes * step_s / seconds
    beats = heartbeat_bytes_per_s(nodes, overlay)
    return {
        "nodes": nodes,
        "samples_per_s": nodes * batch / seconds,
        "speedup": speedup,
        "efficiency": speedup / nodes,
        "out_mb_per_s": ((nodes - 1) * message_bytes / seconds + beats) / 1e6,
        "heartbeat_share": beats / max(1e-9, (nodes - 1) * message_bytes / seconds + beats),
        "bottleneck": bottleneck,
    }


def print_table(args):
    link = args.link_gbit * 1e9 / 8
    name = "full mesh" if args.overlay == "mesh" else "tree overlay"
    print(f"{name}, {args.link_gbit:g} Gbit/s each way, step {args.step_ms:g} ms "
          f"(batch {args.batch}), message {args.message_kb:g} KB per minibatch, "
          f"heartbeats {HEARTBEAT_HZ:g}/s of {H0:g} + {H1:g} x N bytes")
    print("| nodes | samples/s | speed-up | efficiency | out per node | of it heartbeats "
          "| bound by | Strom Table 2 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for n in args.nodes:
        r = row(n, args.step_ms / 1e3, args.message_kb * 1e3, link, args.batch, args.overlay)
        strom = STROM_TABLE_2.get(n)
        print(f"| {n:,} | {r['samples_per_s']:,.0f} | {r['speedup']:,.1f} | "
              f"{100 * r['efficiency']:.0f}% | {r['out_mb_per_s']:,.1f} MB/s | "
              f"{100 * r['heartbeat_share']:.0f}% | {r['bottleneck']} | "
              f"{'%gx' % strom if strom else '-'} |")


def check():
    """The model beside what the lab measured (docs/scaling.md)."""
    print("100 Mbit/s links, 4 workers, 150 steps an epoch (docs/scaling.md):")
    alone_step = 5.9 / 150  # the dense worker alone: 5.9 s an epoch
    for name, message, measured in (("dense fp32", 2.68e6, "94-103 s training, 107 s wall"),
                                     ("threshold", 5.2e3, "7.3 s wall")):
        seconds, bound = step(4, alone_step, message, 100e6 / 8)
        print(f"  {name}: model {150 * seconds:.1f} s an epoch ({bound}-bound); "
              f"measured {measured}")
    print("synthetic members, 2,335-byte messages at 5/s (docs/scaling.md), "
          "bytes out per node:")
    # Measured 2026-11-23 (docs/scaling.md); the tree's at 32 include 37
    # KB/s of duplicates (5,114) on the saturated machine.
    for overlay, n, measured in (("mesh", 8, 96.5), ("mesh", 16, 238.6), ("mesh", 32, 576.4),
                                 ("tree", 8, 93.3), ("tree", 16, 213.6), ("tree", 32, 488.5)):
        own = 5 * (n - 1) * 2335
        beats = heartbeat_bytes_per_s(n, overlay)
        print(f"  {overlay} {n} nodes: model {(own + beats) / 1e3:,.0f} KB/s (messages "
              f"{own / 1e3:,.0f}, heartbeats {beats / 1e3:,.0f}); measured {measured} KB/s")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="10,80,1000",
                   type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--link-gbit", type=float, default=10.0)
    p.add_argument("--step-ms", type=float, default=3.8,
                   help="compute per minibatch per node (H100, 14.2M parameters: "
                        "0.948 ms at batch 256, x4 for 1024)")
    p.add_argument("--message-kb", type=float, default=69.0,
                   help="update message per minibatch (Strom Table 3, tau 4)")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--overlay", choices=("mesh", "tree"), default="mesh")
    p.add_argument("--check", action="store_true",
                   help="print the model beside the lab's measurements")
    args = p.parse_args()
    if args.check:
        check()
        return 0
    print_table(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
