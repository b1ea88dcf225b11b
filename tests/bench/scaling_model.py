#!/usr/bin/env python3
"""The scaling model of docs/scaling.md: what a full-mesh reckon cluster of N
nodes does per minibatch, from a few measured inputs, and where it stops
scaling.

Per node and minibatch (one step, one message of M bytes, u = 8M / bits per
update +-tau updates, out; N-1 such in):
  training thread  t_c + (N-1) u / gpu_apply      the GPU step, then the
                   peers' messages applied to the training replica (between
                   steps: not overlapped yet, issue 37's double buffering)
  node             (N-1) u / inbound(c)   each peer message validated and
                   ordered (CPU, overlapped with the training thread; a
                   worker's node keeps no mirror since 2026-11-27, so a GPU
                   worker's host applies nothing), at the rate `reckonctl
                   bench inbound` measured, with c receive threads (below)
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

The node's inbound rate is measured, not guessed: updates per second the
node accepted at Strom's size (14.6M parameters, 44,000 updates a message)
with 1, 2 and 16 receive threads, from `reckonctl bench inbound --json` (the
`gpu-host` rows: a worker's node with no mirror whose drain applies
nothing, as a GPU worker's host; the `after` rows of an older bench;
`--inbound-json FILE`) or, without a file, the figures the H100 host gave
(docs/benchmarks.md). How it grows with cores is fitted to one thread's
rate and the most threads' (Amdahl: a share p of the work runs in parallel, r(c) = r(1) /
((1 - p) + p / c)); `--node-cores` says how many the node has.

Checked against what the lab measured (docs/scaling.md): `--check` prints the
model beside the 100 Mbit/s runs and the synthetic members' bytes.

Usage: scaling_model.py [--nodes 10,80,1000] [--link-gbit 10] [--step-ms 2.96]
                        [--message-kb 69] [--batch 1024] [--overlay mesh|tree]
                        [--inbound-json FILE] [--node-cores 16]
                        [--inbound-speedup F] [--check]
"""
import argparse
import json
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


# `reckonctl bench inbound --messages 100 --train-steps 300 --json` on the
# device machine's host (one H100, 16 cores), 2026-11-27 (tests/gpu/run.sh;
# docs/benchmarks.md "The CUDA backend on an H100"): Strom's size, the
# `gpu-host` rows (a worker's node without a mirror whose apply runs on the
# device), updates a second with 1, 2 and 16 receive threads. One run; the
# 2-core VM measured 109 and 204 M with 1 and 2 threads the same day.
MEASURED_INBOUND = {1: 94.10e6, 2: 173.89e6, 16: 589.26e6}
MEASURED_INBOUND_SOURCE = ("docs/figures/bench-inbound-h100-2026-11-27.jsonl (reckonctl bench "
                           "inbound, gpu-host rows, the H100 host's 16 cores)")
MEASURED_INBOUND_CORES = 16


class Inbound:
    """Updates a second one node accepts with c receive threads: r(1) and the
    parallel share p fitted to two measured thread counts (Amdahl)."""

    def __init__(self, by_threads, source):
        if 1 not in by_threads or len(by_threads) < 2:
            raise ValueError("the inbound rate needs 1 thread and at least one more")
        self.by_threads = dict(sorted(by_threads.items()))
        self.source = source
        self.r1 = self.by_threads[1]
        c = max(self.by_threads)
        # r(c) / r(1) = 1 / ((1 - p) + p / c)  =>  p = (1 - r1 / rc) / (1 - 1 / c)
        p = (1 - self.r1 / self.by_threads[c]) / (1 - 1 / c)
        self.parallel_share = min(1.0, max(0.0, p))

    def scaled(self, factor, why):
        """These rates `factor` times faster at every thread count (the same
        parallel share): a per-core speed-up of the node measured elsewhere,
        side by side, since these rates were (--inbound-speedup)."""
        if not factor > 0:
            raise ValueError(f"a speed-up must be above 0, not {factor}")
        return Inbound({t: r * factor for t, r in self.by_threads.items()},
                       f"{self.source}, x {factor:g}: {why}")

    def per_s(self, cores):
        p = self.parallel_share
        return self.r1 / ((1 - p) + p / max(1, cores))

    def describe(self):
        points = ", ".join(f"{t} thread{'s' if t > 1 else ''} {r / 1e6:.1f} M/s"
                           for t, r in self.by_threads.items())
        return (f"node inbound {points} ({self.source}): parallel share "
                f"{self.parallel_share:.2f}, at most {self.per_s(1e9) / 1e6:.1f} M/s on any "
                f"number of cores")


def read_inbound_json(path):
    """The `gpu-host` rows (else the `mirror` rows, which benches before
    2026-11-30 named `after`) at Strom's size of `reckonctl bench inbound
    --json` output: updates/s by threads (averaged over repeated rows)."""
    sums = {"gpu-host": {}, "mirror": {}}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            path_name = "mirror" if r.get("path") == "after" else r.get("path")
            if r.get("size") != "strom" or path_name not in sums:
                continue
            by_threads = sums[path_name]
            total, n = by_threads.get(r["threads"], (0.0, 0))
            by_threads[r["threads"]] = (total + r["updates_per_s"], n + 1)
    chosen = "gpu-host" if sums["gpu-host"] else "mirror"
    return Inbound({t: total / n for t, (total, n) in sums[chosen].items()},
                   f"{path}, {chosen} rows")


class Rates:
    """Per-update rates: Rice's size, the node's measured inbound rate with
    `node_cores` receive threads, and the H100's batched apply (issue 16)."""

    def __init__(self, inbound=None, node_cores=MEASURED_INBOUND_CORES):
        self.bits_per_update = 12.5  # Rice at p = 1e-3
        self.inbound = inbound or Inbound(MEASURED_INBOUND, MEASURED_INBOUND_SOURCE)
        self.node_cores = node_cores
        # The H100's batched apply of 80 peers' messages at once (79 x 44,000
        # updates in 0.526 ms; reckonctl bench gpu, 2026-11-27).
        self.gpu_apply_per_s = 6.59e9

    def node_per_s(self):
        return self.inbound.per_s(self.node_cores)


def updates_in(nodes, message_bytes, rates):
    """Peer updates one node takes in per step."""
    return (nodes - 1) * 8 * message_bytes / rates.bits_per_update


def step(nodes, step_s, message_bytes, link_bytes_per_s, rates=None, overlay="mesh"):
    """(seconds per step, bottleneck) of one node in a cluster of `nodes`."""
    rates = rates or Rates()
    if nodes == 1:
        return step_s, "compute"
    spare = link_bytes_per_s - heartbeat_bytes_per_s(nodes, overlay)
    if spare <= 0:
        return float("inf"), "heartbeats fill the link"
    u = updates_in(nodes, message_bytes, rates)
    parts = {
        "compute": step_s + u / rates.gpu_apply_per_s,
        "node CPU": u / rates.node_per_s(),
        "link": (nodes - 1) * message_bytes / spare,
    }
    bound = max(parts, key=parts.get)
    return parts[bound], bound


def compute_bound_inbound(nodes, step_s, message_bytes, rates):
    """Updates/s the node must accept so that it is no longer the bound: its
    term equal to the compute term (the GPU step and batched apply)."""
    u = updates_in(nodes, message_bytes, rates)
    return u / (step_s + u / rates.gpu_apply_per_s)


def row(nodes, step_s, message_bytes, link_bytes_per_s, batch, overlay="mesh", rates=None):
    seconds, bottleneck = step(nodes, step_s, message_bytes, link_bytes_per_s, rates, overlay)
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


def print_table(args, rates):
    link = args.link_gbit * 1e9 / 8
    name = "full mesh" if args.overlay == "mesh" else "tree overlay"
    print(f"{name}, {args.link_gbit:g} Gbit/s each way, step {args.step_ms:g} ms "
          f"(batch {args.batch}), message {args.message_kb:g} KB per minibatch, "
          f"heartbeats {HEARTBEAT_HZ:g}/s of {H0:g} + {H1:g} x N bytes, "
          f"{rates.node_cores:g} receive threads: {rates.node_per_s() / 1e6:.1f} M updates/s")
    print(rates.inbound.describe())
    print("| nodes | samples/s | speed-up | efficiency | out per node | of it heartbeats "
          "| bound by | Strom Table 2 | node inbound to be compute-bound |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for n in args.nodes:
        r = row(n, args.step_ms / 1e3, args.message_kb * 1e3, link, args.batch, args.overlay,
                rates)
        strom = STROM_TABLE_2.get(n)
        need = "-"
        if n > 1:
            u = compute_bound_inbound(n, args.step_ms / 1e3, args.message_kb * 1e3, rates)
            # A hair above the tie, so that the bound named is what binds next.
            faster = 1.000001 * u
            then = row(n, args.step_ms / 1e3, args.message_kb * 1e3, link, args.batch,
                       args.overlay, Rates(Inbound({1: faster, 2: faster}, "needed"), 1))
            bound = then["bottleneck"]
            if bound in ("compute", "node CPU", "link"):
                bound += "-bound"
            need = (f"{u / 1e6:,.0f} M/s ({u / rates.node_per_s():.1f}x): "
                    f"{then['speedup']:,.1f}x, {bound}")
        print(f"| {n:,} | {r['samples_per_s']:,.0f} | {r['speedup']:,.1f} | "
              f"{100 * r['efficiency']:.0f}% | {r['out_mb_per_s']:,.1f} MB/s | "
              f"{100 * r['heartbeat_share']:.0f}% | {r['bottleneck']} | "
              f"{'%gx' % strom if strom else '-'} | {need} |")

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
    p.add_argument("--step-ms", type=float, default=2.96,
                   help="compute per minibatch per node (H100, Strom's network at batch "
                        "1,024, fp32: 2.96 ms, reckonctl bench gpu, 2026-11-27)")
    p.add_argument("--message-kb", type=float, default=69.0,
                   help="update message per minibatch (Strom Table 3, tau 4)")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--overlay", choices=("mesh", "tree"), default="mesh")
    p.add_argument("--inbound-json", metavar="FILE",
                   help="`reckonctl bench inbound --json` output: the node's measured rate "
                        "(default: the figures docs/benchmarks.md records)")
    p.add_argument("--node-cores", type=float, default=MEASURED_INBOUND_CORES,
                   help="receive threads a node has (default 16: the H100 host measured)")
    p.add_argument("--inbound-speedup", type=float, metavar="F",
                   help="the inbound rates times F: a projection, for a per-core speed-up "
                        "of the node measured since they were (the same bench, old and new "
                        "binary side by side on one machine)")
    p.add_argument("--check", action="store_true",
                   help="print the model beside the lab's measurements")
    args = p.parse_args()
    if args.check:
        check()
        return 0
    try:
        inbound = read_inbound_json(args.inbound_json) if args.inbound_json else None
    except (OSError, ValueError, KeyError) as e:
        print(f"scaling_model.py: --inbound-json {args.inbound_json}: {e}", file=sys.stderr)
        return 2
    rates = Rates(inbound, args.node_cores)
    if args.inbound_speedup is not None:
        try:
            rates.inbound = rates.inbound.scaled(args.inbound_speedup,
                                                 "projected with --inbound-speedup")
        except ValueError as e:
            print(f"scaling_model.py: --inbound-speedup: {e}", file=sys.stderr)
            return 2
    print_table(args, rates)
    return 0


if __name__ == "__main__":
    sys.exit(main())
