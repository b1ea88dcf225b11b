#!/usr/bin/env python3
"""Plays a member of a token cluster turned hostile (reckon-attacker, no TLS)
against real reckon-worker processes, and checks what docs/gossip.md's
threat model promises.

  random   N workers train together; the attacker joins them with the
           token and, for --attack-seconds, sends randomized sequences of
           valid-looking frames on streams it opens and drops (Hellos with
           odd incarnations, other members' ids, lanes; Updates of invented
           origins, early, duplicated, corrupted; made-up heartbeats;
           Leaves, Refusals, Status and Snapshot calls) and answers every
           dial with a permanent Refusal. Passes when no worker stops or
           hangs (each answers /status within 2 s throughout), each
           worker's memory stays under its caps (RSS above its level
           before the attack within 1.25x of the most its counters held
           so far, plus --rss-slack-mb for gRPC's buffers), and the
           workers end identical (same weight hash and version vector).
           The attacker runs at nice 19: it stands for another machine.
           It invents --invented origins; past --max-origins (less the
           members') the workers hold different sets, which the threat
           model says a member can do: then the pass condition is that
           every worker ends promptly with exit 1 and "replicas diverged"
           naming --max-origins (not a hang, not another failure).
  origins  two workers train, then serve; the attacker sends --origins
           invented origins at seq 2 (never applicable) to one of them.
           Passes when the origins past --max-origins are refused
           (origins_refused), what is held stays under --early-cap-mb,
           and the worker's RSS grew by at most 1.25x what its counters
           say it holds (plus --rss-slack-mb).

  tests/attack/attack.py random --worker build/worker/reckon-worker \\
      --attacker build/tests/reckon-attacker --attack-seconds 20
  tests/attack/attack.py origins --worker build/worker/reckon-worker \\
      --attacker build/tests/reckon-attacker --origins 200000 --max-origins 250000

Prints FIGURES lines and one JSON object (--json writes it too); exit 0
when every check holds, 1 otherwise.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chaos"))
from soak import free_ports, http_get  # noqa: E402

TOKEN = "attack-harness-token"


def data_identity(folder):
    """The fingerprint's `data` of IDX files, computed from docs/protocol.md
    section 3's words alone (a third party's check of that text); None for
    other datasets."""
    import gzip
    import hashlib
    import struct
    files = []
    for prefix in ("train", "t10k"):
        for what in ("-images-idx3-ubyte", "-labels-idx1-ubyte"):
            plain = os.path.join(folder, prefix + what)
            files.append(plain if os.path.exists(plain) else plain + ".gz")
    if not all(os.path.exists(f) for f in files):
        return None

    def samples(path):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            return struct.unpack(">I", f.read(8)[4:8])[0]

    digest = hashlib.sha256()
    for path in files:
        size = os.path.getsize(path)
        digest.update(os.path.basename(path).encode() + b"\0")
        digest.update(struct.pack("<Q", size))
        with open(path, "rb") as f:
            head = f.read(min(size, 65536))
            tail = b""
            if size > len(head):
                f.seek(size - min(size - len(head), 65536))
                tail = f.read()
        digest.update(head + tail)
    return (f"idx train {samples(files[0])} test {samples(files[2])} "
            f"{digest.hexdigest()[:16]}")


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class Worker:
    def __init__(self, index, count, gossip, http, folder, args, extra):
        self.name = f"w{index}"
        self.gossip = gossip
        self.http = http
        self.folder = folder
        self.summary = os.path.join(folder, f"{self.name}.json")
        flags = [
            "--node-id", self.name, "--listen", gossip[index], "--peers", ",".join(gossip),
            "--shard", f"{index}/{count}", "--http-listen", http[index],
            "--cluster-token", TOKEN, "--summary-json", self.summary,
            "--after-training", "serve", "--layers", args.layers, "--threads", "1",
            "--epochs", str(args.epochs), "--eval-samples", "1000", "--heartbeat-ms", "50",
            "--failure-timeout-ms", "1500", "--progress", "off",
            "--quiesce-timeout-s", str(int(args.attack_seconds) + 300),
            "--log-cap-mb", str(args.log_cap_mb), "--early-cap-mb", str(args.early_cap_mb),
            "--max-origins", str(args.max_origins),
        ] + (["--data-dir", args.data_dir] if args.data_dir else []) + extra
        self.log_path = os.path.join(folder, f"{self.name}.log")
        wrap = args.wrap_first.split() if index == 0 and args.wrap_first else []
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(wrap + [args.worker] + flags, stdout=log, stderr=log)
        self.http_address = http[index]

    def status(self, timeout=2.0):
        text = http_get(self.http_address, "/status", timeout=timeout)
        try:
            return json.loads(text) if text else None
        except ValueError:
            return None

    def alive(self):
        return self.process.poll() is None

    def done(self):
        return os.path.exists(self.summary)

    def held(self, status):
        """Bytes the node's counters say it holds: log, early arrivals, inbox,
        and the frames queued to each member (its send queues)."""
        node = status or {}
        return (sum(int(node.get(k, 0) or 0) for k in ("log_bytes", "early_bytes", "inbox_bytes"))
                + sum(int(m.get("queued_bytes", 0) or 0) for m in node.get("members", [])))

    def stop(self):
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def tail(self, lines=15):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])


def start_cluster(args, count, folder):
    ports = free_ports(2 * count)
    gossip = [f"127.0.0.1:{p}" for p in ports[:count]]
    http = [f"127.0.0.1:{p}" for p in ports[count:]]
    return [Worker(i, count, gossip, http, folder, args, []) for i in range(count)]


def wait_for(predicate, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.2)
    print(f"FAIL: {what} within {timeout:.0f} s")
    return False


def summaries(workers):
    out = []
    for w in workers:
        with open(w.summary) as f:
            s = json.load(f)
        out.append((s.get("weight_hash"), json.dumps(s.get("version_vector"), sort_keys=True)))
    return out


def counters(status):
    return (status or {}).get("counters", {})


def run_attacker(args, targets, scenario, extra):
    cmd = [args.attacker, "--targets", ",".join(targets), "--token", TOKEN,
           "--scenario", scenario, "--seed", str(args.seed)] + extra
    # It stands for another machine: at the lowest priority, so that the
    # workers' latency measures what its frames cost them, not a share of
    # these cores taken by its own threads.
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: os.nice(19))


def random_scenario(args, folder):
    workers = start_cluster(args, args.workers, folder)
    failures = []
    expected_exit = 0
    figures = {"workers": args.workers, "attack_seconds": args.attack_seconds}
    try:
        # Training (its data loaded: fashion-mnist is 188 MB of floats):
        # what grows from here is the attack's.
        if not wait_for(lambda: all(int((w.status() or {}).get("local_steps", 0) or 0) > 0
                                    for w in workers), 120, "every worker training"):
            return 1, figures
        time.sleep(1)
        baseline = [rss_bytes(w.process.pid) for w in workers]
        attacker = run_attacker(args, [w.gossip[i] for i, w in enumerate(workers)], "random",
                                ["--seconds", str(args.attack_seconds),
                                 "--actions", args.actions, "--phantoms", str(args.phantoms),
                                 "--invented", str(args.invented)])
        peak_over = [0] * len(workers)
        # The most each worker's counters held so far: memory freed stays
        # with the process (glibc keeps it for the next allocations), so
        # RSS follows what was held at the peak, not what is held now.
        peak_held = [0] * len(workers)
        slowest = 0.0
        worst = [None] * len(workers)
        while attacker.poll() is None:
            for i, w in enumerate(workers):
                if not w.alive():
                    failures.append(f"{w.name} exited {w.process.returncode} during the attack")
                    continue
                t0 = time.time()
                status = w.status(timeout=2.0)
                slowest = max(slowest, time.time() - t0)
                if status is None:
                    failures.append(f"{w.name} did not answer /status within 2 s")
                    continue
                rss = rss_bytes(w.process.pid) or 0
                peak_held[i] = max(peak_held[i], w.held(status))
                over = rss - baseline[i] - 1.25 * peak_held[i] - args.rss_slack_mb * 2**20
                if over > peak_over[i]:
                    peak_over[i] = over
                    worst[i] = (rss - baseline[i], peak_held[i], {
                        k: int(status.get(k, 0) or 0) // 2**20
                        for k in ("log_bytes", "early_bytes", "inbox_bytes")},
                        len(status.get("members", [])))
                early = int(status.get("early_bytes", 0) or 0)
                if early > args.early_cap_mb * 2**20:
                    failures.append(f"{w.name} holds {early} bytes of early arrivals")
                if int(status.get("log_bytes", 0) or 0) > args.log_cap_mb * 2**20:
                    failures.append(f"{w.name}'s log holds more than its cap")
            if failures:
                attacker.kill()
                break
            time.sleep(0.5)
        read_report(attacker, figures, failures)
        figures["slowest_status_s"] = round(slowest, 3)
        for i, w in enumerate(workers):
            if peak_over[i] > 0:
                failures.append(f"{w.name}'s RSS grew {worst[i][0] / 2**20:.1f} MiB while its "
                                f"counters held at most {worst[i][1] / 2**20:.1f} MiB (more than "
                                f"1.25x + {args.rss_slack_mb} MiB; MiB held then: {worst[i][2]}, "
                                f"{worst[i][3]} members)")
        figures["peak_held_mib"] = {w.name: round(peak_held[i] / 2**20, 1)
                                    for i, w in enumerate(workers)}
        past_cap = args.invented + args.workers + 1 > args.max_origins
        figures["invented_past_the_cap"] = past_cap
        if past_cap and not failures:
            # The threat model's row: the workers hold different sets. Each
            # ends promptly: with exit 1 and the divergence named, or (one
            # whose diverged peers left, so that it agrees with every member
            # still there) finished as usual; never two finished with
            # different weights, never a hang.
            if not wait_for(lambda: all(w.done() or not w.alive() for w in workers),
                            args.finish_timeout, "every worker ended or finished"):
                failures.append("the workers did not end")
            diverged = [w for w in workers if not w.alive()]
            for w in diverged:
                log = w.tail(400)
                if w.process.returncode != 1 or "replicas diverged" not in log \
                        or "--max-origins" not in log:
                    failures.append(f"{w.name} did not end with exit 1 and a divergence naming "
                                    f"--max-origins (exit {w.process.returncode}):\n{w.tail()}")
            figures["ended_diverged"] = [w.name for w in diverged]
            if not diverged:
                failures.append("no worker reported the divergence")
            expected_exit = 1
        elif all(w.alive() for w in workers) and not wait_for(
                lambda: all(w.done() for w in workers), args.finish_timeout,
                "every worker finished"):
            failures.append("the workers did not finish")
        final = [w.status() for w in workers]
        figures["counters"] = {w.name: counters(s) for w, s in zip(workers, final)}
        figures["rss_growth_mib"] = {
            w.name: round(((rss_bytes(w.process.pid) or 0) - baseline[i]) / 2**20, 1)
            for i, w in enumerate(workers)}
        finished = [w for w in workers if w.alive() and w.done()]
        if finished and (expected_exit == 1 or len(finished) == len(workers)):
            agree = summaries(finished)
            if expected_exit == 1:  # vectors may differ by refused origins that moved nothing
                agree = [weights for weights, _ in agree]
            figures["replicas"] = len(set(agree))
            if len(set(agree)) != 1:
                failures.append(f"the workers ended with {len(set(agree))} different replicas")
    finally:
        # Those that ended with the divergence were checked above.
        stop_all([w for w in workers if expected_exit == 0 or w.alive()], failures)
    return report_result(figures, failures, args)


def origins_scenario(args, folder):
    workers = start_cluster(args, 2, folder)
    failures = []
    figures = {"origins": args.origins, "max_origins": args.max_origins,
               "early_cap_mb": args.early_cap_mb}
    try:
        if not wait_for(lambda: all(w.done() for w in workers), 300, "the two trained"):
            return 1, figures
        victim = workers[0]
        before_status = victim.status()
        # docs/protocol.md's rule for the fingerprint's `data`, as a third
        # party would compute it, against what the worker says.
        expected = data_identity(args.data_dir or "/usr/share/datasets/fashion-mnist")
        said = ((before_status or {}).get("fingerprint") or {}).get("data")
        if expected is None:
            print("data identity: not an IDX dataset, protocol.md's rule not checked here")
        elif expected != said:
            failures.append(f"the fingerprint's data is {said!r}, protocol.md's rule gives "
                            f"{expected!r}")
        else:
            print(f"data identity as protocol.md says: {expected}")
        time.sleep(1)
        before = rss_bytes(victim.process.pid)
        held_before = victim.held(victim.status())
        attacker = run_attacker(args, [workers[0].gossip[0]], "origins",
                                ["--origins", str(args.origins)])
        read_report(attacker, figures, failures)
        sent = args.origins
        seen = lambda s: (int(s.get("early_held", 0) or 0) - int(before_status.get("early_held", 0) or 0)
                          + int(counters(s).get("origins_refused", 0) or 0)
                          + int(counters(s).get("early_dropped", 0) or 0))
        wait_for(lambda: victim.status() and seen(victim.status()) >= sent, 120,
                 "every invented origin held or refused")
        status = victim.status()
        after = rss_bytes(victim.process.pid)
        held = victim.held(status) - held_before
        grew = after - before
        c = counters(status)
        figures.update({
            "early_held": int(status.get("early_held", 0) or 0),
            "early_bytes": int(status.get("early_bytes", 0) or 0),
            "origins_refused": int(c.get("origins_refused", 0) or 0),
            "early_dropped": int(c.get("early_dropped", 0) or 0),
            "rss_growth_bytes": grew, "counted_growth_bytes": held,
        })
        print(f"FIGURES {sent} invented origins at seq 2: {figures['early_held']} held in "
              f"{figures['early_bytes'] / 2**20:.1f} MiB, {figures['origins_refused']} refused, "
              f"{figures['early_dropped']} dropped; RSS grew {grew / 2**20:.1f} MiB, counters "
              f"{held / 2**20:.1f} MiB ({grew / max(held, 1):.2f}x)")
        if not victim.alive():
            failures.append(f"the victim exited {victim.process.returncode}")
        expected_refused = max(0, sent - args.max_origins)
        if figures["origins_refused"] < expected_refused:
            failures.append(f"{figures['origins_refused']} origins refused, expected at least "
                            f"{expected_refused} past --max-origins {args.max_origins}")
        if figures["early_bytes"] > args.early_cap_mb * 2**20:
            failures.append(f"early arrivals hold {figures['early_bytes']} bytes, over the cap")
        if grew > 1.25 * held + args.rss_slack_mb * 2**20:
            failures.append(f"RSS grew {grew / 2**20:.1f} MiB, more than 1.25x the "
                            f"{held / 2**20:.1f} MiB counted + {args.rss_slack_mb} MiB")
    finally:
        stop_all(workers, failures)
    return report_result(figures, failures, args)


def read_report(attacker, figures, failures):
    """Waits for the attacker and keeps its JSON report (its last line)."""
    report = attacker.communicate()[0]
    try:
        figures["attacker"] = json.loads(report.strip().splitlines()[-1])
    except (ValueError, IndexError):
        failures.append(f"the attacker printed no report: {report!r}")


def stop_all(workers, failures):
    """SIGTERM to each worker; one that did not exit 0 is a failure, with its log's end."""
    for w in workers:
        code = w.stop()
        if code != 0:
            failures.append(f"{w.name} exited {code}:\n{w.tail()}")


def report_result(figures, failures, args):
    figures["failures"] = failures
    print(json.dumps(figures, indent=1, sort_keys=True))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1, sort_keys=True)
    for failure in failures:
        print("FAIL:", failure)
    return (1 if failures else 0), figures


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", choices=["random", "origins"])
    p.add_argument("--worker", required=True)
    p.add_argument("--attacker", required=True)
    p.add_argument("--data-dir", default="")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--layers", default="784,64,10")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--attack-seconds", type=float, default=15)
    p.add_argument("--finish-timeout", type=float, default=240)
    p.add_argument("--origins", type=int, default=200000)
    p.add_argument("--max-origins", type=int, default=4096)
    p.add_argument("--invented", type=int, default=3000,
                   help="random: origins the attacker invents in all (reckon-attacker --invented)")
    p.add_argument("--early-cap-mb", type=int, default=256)
    p.add_argument("--log-cap-mb", type=int, default=256)
    p.add_argument("--rss-slack-mb", type=float, default=32)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--phantoms", type=int, default=40,
                   help="random: made-up members a heartbeat names at most")
    p.add_argument("--actions", default="",
                   help="random: only these kinds of action (reckon-attacker --actions)")
    p.add_argument("--json", default="")
    p.add_argument("--wrap-first", default="",
                   help="a command the first worker runs under (a profiler: 'heaptrack -o F')")
    p.add_argument("--work-dir", default="")
    args = p.parse_args()
    folder = args.work_dir or tempfile.mkdtemp(prefix="reckon-attack-")
    os.makedirs(folder, exist_ok=True)
    run = random_scenario if args.scenario == "random" else origins_scenario
    code, _ = run(args, folder)
    print(f"logs: {folder}")
    return code


if __name__ == "__main__":
    sys.exit(main())
