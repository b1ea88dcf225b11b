#!/usr/bin/env python3
"""Chaos soak: a cluster of reckon workers trains while an injector kills
(-9), stops (SIGSTOP, then SIGCONT) and partitions random workers every few
seconds and restarts the killed ones, as torchft's injector does. The same
cluster is first run without faults, for the goodput figures.

At the end it checks what reckon promises:
  - every worker's final replica is the same (weight hash, version vector)
    and final (the cluster agreed it is done);
  - nothing published is lost: every message of a killed life that a live
    peer had applied before the kill is in the final version vector;
  - every message applied exactly once: a worker's node counts each message
    it applies, and (for a life that never installed a snapshot) the count
    equals the messages of other origins its final vector holds;
  - each shard trained as planned across restarts: a worker's lives together
    published at least its planned steps less one per kill (a message a kill
    cut off before any peer had it is trained again); the excess, steps
    trained twice, is reported;
and prints the goodput: the cluster's steps/s against the fault-free run's,
and each live worker's step rate while faults happen against its fault-free
rate. Exit 0 when every check holds, 1 otherwise (the figures are printed
either way, and written as JSON with --json).

Partitions need the network lab (`--lab build/ctl/reckonctl`, root): each
worker then runs in a network namespace of its own (`reckonctl lab`,
ctl/net_lab.h), and a partition cuts one worker off, or the cluster in two
halves, for 1 to 4 s (the failure timeout is 1.5 s: long ones make the sides
declare each other dead and rejoin after the heal). Without --lab the workers
run on loopback and only kills and stops are injected.

  tests/chaos/soak.py --worker build/worker/reckon-worker --epochs 3
  tests/chaos/soak.py --worker build/worker/reckon-worker --lab build/ctl/reckonctl \
      --epochs 2600 --clean-epochs 100 --fault-every 5 --fault-seconds 1800 \
      --json soak.json  # the 30-minute run of docs/gossip.md "Chaos soak"
"""
import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_ports(count):
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def http_get(address, path, timeout=1.0):
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=timeout) as r:
            return r.read().decode()
    except Exception:  # noqa: BLE001 - a worker stopped, dead or starting
        return None


class Lab:
    """`reckonctl lab`: one network namespace per worker and the switch
    between them, steered by commands on its stdin (ctl/lab_command.cc)."""

    def __init__(self, reckonctl, workers):
        self.process = subprocess.Popen([reckonctl, "lab", "--workers", str(workers)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"reckonctl lab exited {self.process.wait()}")
        self.description = json.loads(line)
        self.partitioned = False

    def command(self, text):
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()
        answer = json.loads(self.process.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"reckonctl lab: {text}: {answer['error']}")
        return answer

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=30)


class Worker:
    """One slot of the cluster: its successive lives (processes)."""

    def __init__(self, index, args, epochs, addresses, http, exec_prefix, folder):
        self.index = index
        self.epochs = epochs
        self.name = f"w{index}"
        self.args = args
        self.addresses = addresses
        self.http = http                # host:port of its /metrics and /status
        self.exec_prefix = exec_prefix  # `ip netns exec NS` in the lab (it execs: same pid)
        self.folder = folder
        self.process = None
        self.lives = 0
        self.stopped = False
        self.kills = 0
        self.stops = 0

    def summary_path(self, life=None):
        return os.path.join(self.folder, f"{self.name}-life{life or self.lives}.json")

    def start(self):
        self.lives += 1
        flags = [
            "--node-id", self.name, "--listen", self.addresses[self.index],
            "--peers", ",".join(self.addresses), "--shard", f"{self.index}/{self.args.workers}",
            "--http-listen", self.http,
            "--summary-json", self.summary_path(), "--after-training", "serve",
            "--layers", self.args.layers, "--threads", "1", "--epochs", str(self.epochs),
            "--eval-samples", "1000", "--heartbeat-ms", "50", "--failure-timeout-ms", "1500",
            "--quiesce-timeout-s", "600", "--progress", "off",
        ] + (["--data-dir", self.args.data_dir] if self.args.data_dir else [])
        log = open(os.path.join(self.folder, f"{self.name}.log"), "ab")
        self.process = subprocess.Popen(self.exec_prefix + [self.args.worker] + flags,
                                        stdout=log, stderr=log)
        log.close()

    def running(self):
        return self.process is not None and self.process.poll() is None

    def live(self):
        return self.running() and not self.stopped

    def steps(self):
        """This life's steps (its /metrics counter), None when not answering."""
        text = http_get(self.http, "/metrics", timeout=0.5)
        if text is None:
            return None
        m = re.search(r'^reckon_steps_total\{node="%s"\} (\S+)$' % self.name, text, re.M)
        return float(m.group(1)) if m else None

    def cpu_seconds(self):
        """This life's CPU time (user + system), None when it is gone."""
        try:
            with open(f"/proc/{self.process.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def status(self):
        text = http_get(self.http, "/status", timeout=1.0)
        try:
            return json.loads(text) if text else None
        except ValueError:
            return None

    def current_incarnation(self):
        """This life's incarnation, from its log ("node w1 incarnation N")."""
        with open(os.path.join(self.folder, f"{self.name}.log"), errors="replace") as log:
            found = re.findall(r"node %s incarnation (\d+) listening" % self.name, log.read())
        return found[-1] if len(found) == self.lives else None

    def done(self):
        """This life wrote its summary: trained and the cluster agreed."""
        return os.path.exists(self.summary_path())


def summaries_agree(workers):
    """Every worker's summary holds the same replica (hash and vector)."""
    replicas = set()
    for w in workers:
        try:
            with open(w.summary_path()) as f:
                s = json.load(f)
        except (OSError, ValueError):
            return False
        replicas.add((s.get("weight_hash"), json.dumps(s.get("version_vector"), sort_keys=True)))
    return len(replicas) == 1


def applied_seq(status, name, incarnation):
    """The seq of origin name#incarnation in a /status's applied vector."""
    for entry in (status or {}).get("applied", {}).get("entries", []):
        origin = entry.get("origin", {})
        if origin.get("node_id") == name and str(origin.get("incarnation")) == incarnation:
            return int(entry.get("seq", 0))
    return 0


def origin_seqs(vector, name):
    return {o: s for o, s in vector.items() if o.split("#")[0] == name}


def run(args, faults, folder, rng, epochs):
    """One run of the cluster; returns its figures (and the checks' failures)."""
    lab = Lab(args.lab, args.workers) if args.lab else None
    if lab:
        addresses = [f"{ip}:7070" for ip in lab.description["ip"]]
        https = [f"{ip}:9100" for ip in lab.description["ip"]]
        prefixes = lab.description["exec"]
    else:
        ports = free_ports(2 * args.workers)
        addresses = [f"127.0.0.1:{ports[2 * i]}" for i in range(args.workers)]
        https = [f"127.0.0.1:{ports[2 * i + 1]}" for i in range(args.workers)]
        prefixes = [[] for _ in range(args.workers)]
    workers = [Worker(i, args, epochs, addresses, https[i], prefixes[i], folder)
               for i in range(args.workers)]
    start = time.monotonic()
    for w in workers:
        w.start()
    events = []          # (when, what, worker): restarts and SIGCONTs due
    must_hold = {}       # origin -> seq a live peer had applied before the kill
    injected = []
    live_steps = {w.name: 0.0 for w in workers}
    live_seconds = {w.name: 0.0 for w in workers}
    live_cpu = {w.name: 0.0 for w in workers}
    last_sample = {}     # name -> (time, life, steps, cpu seconds) while live
    next_fault = start + args.fault_every
    fault_until = start + args.fault_seconds if faults else start
    try:
        while not all(w.done() for w in workers):
            now = time.monotonic()
            if now - start > args.timeout:
                raise RuntimeError(f"not done after {args.timeout} s")
            for when, what, w in [e for e in events if e[0] <= now]:
                events.remove((when, what, w))
                if what == "restart":
                    w.start()
                elif what == "heal":
                    lab.command("heal")
                    lab.partitioned = False
                else:
                    w.process.send_signal(signal.SIGCONT)
                    w.stopped = False
            for w in workers:
                if w.process.poll() not in (None, -signal.SIGKILL):
                    raise RuntimeError(f"{w.name} exited {w.process.poll()}; see {folder}")
            # The live workers' step rates (a life's counter starts at 0).
            for w in workers:
                steps = w.steps() if w.live() else None
                cpu = w.cpu_seconds() if steps is not None else None
                previous = last_sample.get(w.name)
                if (cpu is not None and previous and previous[1] == w.lives and not w.done()):
                    live_steps[w.name] += steps - previous[2]
                    live_seconds[w.name] += now - previous[0]
                    live_cpu[w.name] += cpu - previous[3]
                last_sample[w.name] = (now, w.lives, steps, cpu) if cpu is not None else None
            if faults and now >= next_fault and now < fault_until:
                next_fault = now + args.fault_every * rng.uniform(0.5, 1.5)
                inject(workers, lab, rng, events, must_hold, injected, now, args)
            time.sleep(0.25)
        wall = time.monotonic() - start
        # The faults end: a partition still in place is healed and a stopped
        # worker continued now, not when their events fall due. A worker cut
        # off after it ended holds the first agreement until it hears the
        # others' later one (a member that was cut off or stopped added steps
        # after it): the promise is about the cluster once the faults are
        # over, so they are over before it is checked.
        for when, what, w in list(events):
            if what == "heal":
                lab.command("heal")
                lab.partitioned = False
                events.remove((when, what, w))
            elif what == "cont":
                w.process.send_signal(signal.SIGCONT)
                w.stopped = False
                events.remove((when, what, w))
        # A worker that ended last (cut off, or restarted late) ends when the
        # serving others agree with it; they rewrite their summaries a moment
        # later ("cluster agreed again"): give them that moment.
        settle_until = time.monotonic() + 30
        while time.monotonic() < settle_until and not summaries_agree(workers):
            time.sleep(0.25)
    finally:
        for w in workers:
            if w.running():
                if w.stopped:
                    w.process.send_signal(signal.SIGCONT)
                w.process.send_signal(signal.SIGTERM)
        for w in workers:
            if w.process is not None:
                try:
                    code = w.process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    w.process.kill()
                    code = "killed after 60 s"
                if code not in (0, -signal.SIGKILL):
                    print(f"{w.name}: exit {code} after SIGTERM", file=sys.stderr)
        if lab:
            lab.close()
    summaries = {w.name: json.load(open(w.summary_path())) for w in workers}
    return {
        "wall_s": wall, "workers": workers, "summaries": summaries, "must_hold": must_hold,
        "faults": injected,
        "live_rate": {n: live_steps[n] / live_seconds[n] if live_seconds[n] else 0.0
                      for n in live_steps},
        "live_cpu_rate": {n: live_steps[n] / live_cpu[n] if live_cpu[n] else 0.0
                          for n in live_steps},
    }


def inject(workers, lab, rng, events, must_hold, injected, now, args):
    """One fault. The first ones are one of each kind, in a random order (so
    that a short run has them all); then the kinds are drawn by their shares."""
    kinds_done = {f[0] for f in injected}
    first = [k for k in (["kill", "stop"] + (["partition"] if lab else [])) if k not in kinds_done]
    kind = rng.choice(first) if first else None
    if kind is None:
        if lab and rng.random() < args.partition_share:
            kind = "partition"
        else:
            kind = "kill" if rng.random() < args.kill_share else "stop"
    if kind == "partition" and lab.partitioned:
        kind = "stop"
    if kind == "partition":
        # One worker cut off from the rest, or two halves.
        order = list(range(len(workers)))
        rng.shuffle(order)
        cut = 1 if rng.random() < 0.5 else len(workers) // 2
        groups = [order[:cut], order[cut:]]
        lab.command("partition " + " ".join(",".join(map(str, g)) for g in groups))
        lab.partitioned = True
        events.append((now + rng.uniform(1.0, 4.0), "heal", None))
        injected.append(("partition", "|".join(",".join(f"w{i}" for i in sorted(g))
                                               for g in groups), round(now, 2)))
        return
    candidates = [w for w in workers if w.live() and not w.done()]
    if not candidates:
        return
    w = rng.choice(candidates)
    if kind == "kill":
        # What live peers applied of this life: it must survive the kill.
        incarnation = w.current_incarnation()
        for peer in workers:
            if incarnation and peer is not w and peer.live():
                seq = applied_seq(peer.status(), w.name, incarnation)
                origin = f"{w.name}#{incarnation}"
                if seq:
                    must_hold[origin] = max(must_hold.get(origin, 0), seq)
        w.process.send_signal(signal.SIGKILL)
        w.process.wait()
        w.kills += 1
        events.append((now + args.restart_after, "restart", w))
        injected.append(("kill", w.name, round(now, 2)))
    else:
        w.process.send_signal(signal.SIGSTOP)
        w.stopped = True
        w.stops += 1
        events.append((now + rng.uniform(0.5, 3.0), "cont", w))
        injected.append(("stop", w.name, round(now, 2)))


def planned_steps(clean, name, clean_epochs, epochs):
    """Worker `name`'s planned steps in a run of `epochs`: the fault-free
    run's per epoch (every epoch has the same steps: no warm-up ramp)."""
    vector = next(iter(clean["summaries"].values()))["version_vector"]
    return sum(origin_seqs(vector, name).values()) // clean_epochs * epochs


def exactly_once(summary):
    """(messages of other origins this life applied, messages of other
    origins its final vector holds). Equal when each was applied exactly
    once (the node counts each message it applies; a duplicate applied
    would count without moving the vector). The second is None for a life
    that installed a snapshot (it holds messages it never applied)."""
    node = summary.get("node", {})
    own = f"{summary['node_id']}#{summary['incarnation']}"
    others = sum(seq for origin, seq in summary["version_vector"].items() if origin != own)
    if node.get("snapshots_loaded", 0) > 0:
        return node.get("updates_applied", 0), None
    return node.get("updates_applied", 0), others


def check(clean, chaos, clean_epochs, epochs):
    """The promises, as a list of failures (empty: all hold)."""
    failures = []
    summaries = list(chaos["summaries"].values())
    first = summaries[0]
    for name, s in chaos["summaries"].items():
        if s["weight_hash"] != first["weight_hash"] or s["version_vector"] != first["version_vector"]:
            failures.append(f"{name}'s replica differs: {s['weight_hash'][:16]} "
                            f"vs {first['weight_hash'][:16]}")
        if not s.get("final", False):
            failures.append(f"{name}'s replica is not final")
    vector = first["version_vector"]
    for origin, seq in chaos["must_hold"].items():
        if vector.get(origin, 0) < seq:
            failures.append(f"lost: {origin} had {seq} messages applied by a live peer before "
                            f"the kill, the final vector holds {vector.get(origin, 0)}")
    for name, s in chaos["summaries"].items():
        applied, expected = exactly_once(s)
        if expected is not None and applied != expected:
            failures.append(f"{name} applied {applied} messages of other origins, its vector "
                            f"holds {expected}: not every message exactly once")
    for w in chaos["workers"]:
        planned = planned_steps(clean, w.name, clean_epochs, epochs)
        published = sum(origin_seqs(vector, w.name).values())
        if published < planned - w.kills:
            failures.append(f"{w.name} published {published} steps over {w.lives} lives, "
                            f"planned {planned} ({w.kills} kills)")
    return failures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", required=True, help="the reckon-worker binary")
    p.add_argument("--data-dir", default="")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--layers", default="784,256,256,10")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--clean-epochs", type=int, default=0,
                   help="epochs of the fault-free run (0: --epochs); its step rates are what "
                        "the chaos run's are measured against")
    p.add_argument("--fault-every", type=float, default=3.0, help="seconds between faults (mean)")
    p.add_argument("--fault-seconds", type=float, default=0,
                   help="inject faults this long (0: as long as the fault-free run took)")
    p.add_argument("--kill-share", type=float, default=0.5,
                   help="kills among the faults that are not partitions (the rest: stops)")
    p.add_argument("--lab", default="",
                   help="reckonctl: run the workers in its network lab and inject partitions "
                        "(root)")
    p.add_argument("--partition-share", type=float, default=0.25,
                   help="with --lab: partitions among the faults")
    p.add_argument("--restart-after", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--json", default="", help="write the figures here")
    p.add_argument("--work-dir", default="",
                   help="keep the workers' logs and summaries here (default: a temporary folder)")
    args = p.parse_args()
    if args.lab and os.geteuid() != 0:
        print("soak: --lab needs root (network namespaces, TUN): partitions are not injected, "
              "the workers run on loopback", file=sys.stderr)
        args.lab = ""
    rng = random.Random(args.seed)
    clean_epochs = args.clean_epochs or args.epochs
    with tempfile.TemporaryDirectory(prefix="reckon-soak-") as temporary:
        folder = args.work_dir or temporary
        os.makedirs(os.path.join(folder, "clean"), exist_ok=True)
        os.makedirs(os.path.join(folder, "chaos"), exist_ok=True)
        try:
            clean = run(args, False, os.path.join(folder, "clean"), rng, clean_epochs)
            if args.fault_seconds <= 0:
                args.fault_seconds = clean["wall_s"] * args.epochs / clean_epochs
            chaos = run(args, True, os.path.join(folder, "chaos"), rng, args.epochs)
        except (RuntimeError, OSError, ValueError, KeyError) as e:
            logs = "".join(open(os.path.join(folder, sub, f)).read()[-3000:]
                           for sub in ("clean", "chaos")
                           for f in sorted(os.listdir(os.path.join(folder, sub)))
                           if f.endswith(".log"))
            print(f"soak: {e}\n{logs}", file=sys.stderr)
            return 1
        failures = check(clean, chaos, clean_epochs, args.epochs)
        vector = next(iter(chaos["summaries"].values()))["version_vector"]
        clean_steps = sum(next(iter(clean["summaries"].values()))["version_vector"].values())
        planned = sum(planned_steps(clean, w.name, clean_epochs, args.epochs)
                      for w in chaos["workers"])
        published = sum(vector.values())
        # The cluster's planned steps per second of wall time, with faults
        # against without.
        goodput = (planned / chaos["wall_s"]) / (clean_steps / clean["wall_s"])
        kills = sum(1 for f in chaos["faults"] if f[0] == "kill")
        partitions = sum(1 for f in chaos["faults"] if f[0] == "partition")
        stops = len(chaos["faults"]) - kills - partitions
        rates = {n: (chaos["live_rate"][n] / clean["live_rate"][n]
                     if clean["live_rate"][n] else 0.0) for n in clean["live_rate"]}
        cpu_rates = {n: (chaos["live_cpu_rate"][n] / clean["live_cpu_rate"][n]
                         if clean["live_cpu_rate"][n] else 0.0) for n in clean["live_cpu_rate"]}
        counted = [exactly_once(s) for s in chaos["summaries"].values()]
        countable = [c for c in counted if c[1] is not None]
        figures = {
            "workers": args.workers, "layers": args.layers, "epochs": args.epochs,
            "clean_epochs": clean_epochs,
            "network": "network lab" if args.lab else "loopback",
            "faults": len(chaos["faults"]), "kills": kills, "stops": stops,
            "partitions": partitions,
            "fault_free_s": round(clean["wall_s"], 2), "chaos_s": round(chaos["wall_s"], 2),
            "planned_steps": planned, "published_steps": published,
            "steps_trained_twice": published - planned,
            "cluster_goodput": round(goodput, 3),
            "live_rate_fault_free": {n: round(r, 1) for n, r in clean["live_rate"].items()},
            "live_rate_chaos": {n: round(r, 1) for n, r in chaos["live_rate"].items()},
            "live_rate_ratio": {n: round(r, 3) for n, r in rates.items()},
            "live_steps_per_cpu_s_fault_free": {n: round(r, 1)
                                                for n, r in clean["live_cpu_rate"].items()},
            "live_steps_per_cpu_s_chaos": {n: round(r, 1)
                                           for n, r in chaos["live_cpu_rate"].items()},
            "live_steps_per_cpu_s_ratio": {n: round(r, 3) for n, r in cpu_rates.items()},
            "exactly_once_checked": len(countable),
            "failures": failures,
            "fault_log": chaos["faults"],
        }
        print(f"soak: {args.workers} workers, {len(chaos['faults'])} faults ({kills} kill -9, "
              f"{stops} SIGSTOP, {partitions} partitions) in {chaos['wall_s']:.1f} s; "
              f"fault-free {clean['wall_s']:.1f} s ({clean_epochs} epochs)")
        print(f"soak: cluster goodput {figures['cluster_goodput']:.2f} of the fault-free run "
              f"({planned} planned steps, {published} published: "
              f"{published - planned} trained twice)")
        print("soak: live workers' step rate while faults happen / fault-free: " +
              ", ".join(f"{n} {r:.2f}" for n, r in sorted(rates.items())))
        print("soak: their steps per CPU second (what a step costs them; the machine's sharing "
              "apart) / fault-free: " +
              ", ".join(f"{n} {r:.2f}" for n, r in sorted(cpu_rates.items())))
        print(f"soak: replicas identical and final: {not any('replica' in f for f in failures)}; "
              f"lost messages: {sum(1 for f in failures if f.startswith('lost'))}; "
              f"exactly once: {sum(1 for a, e in countable if a == e)} of {len(countable)} "
              f"workers that never installed a snapshot applied as many messages as their "
              f"vector holds ({sum(a for a, _ in countable)})")
        for f in failures:
            print(f"soak: FAILED: {f}", file=sys.stderr)
        if failures:
            # What was done to whom, and when (seconds into the chaos run).
            print("soak: faults: " + "; ".join(" ".join(map(str, f)) for f in chaos["faults"]),
                  file=sys.stderr)
        if args.json:
            with open(args.json, "w") as out:
                json.dump(figures, out, indent=2)
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
