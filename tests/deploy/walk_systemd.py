#!/usr/bin/env python3
"""The systemd path of docs/guide-deploy.md walked as a user with four GPU
machines would, on one machine: four network namespaces on a bridge, each a
"machine" with its own address and host name (m0 to m3 resolve on every
one), each running one worker as reckon-worker@0.service would.

What comes from the repository, not from this test: each machine's
environment file is deploy/systemd/worker.env with the variables the guide
tells the user to set (the guide's list is checked against the file); the
command each runs is the unit's own ExecStart, expanded as systemd does
(%i, ${VAR} one word, $VAR split); the model at the end comes from the
guide's own `reckonctl export` line. What the test chooses: the user's data
(Fashion-MNIST as a NumPy folder: tests/export/fashion_to_npy.py), the CPU
backend (no GPU here), a small model and short run appended to
RECKON_FLAGS, /var/lib/reckon mapped to each machine's folder.

The walk: the four start; m2 is stopped mid-training (SIGTERM, as
`systemctl stop`: exit 3, its checkpoint saved) and started again (it
re-joins from a peer's snapshot); all four end with exit 0 and one replica
(the same weight hash in every summary, each `final`); the guide's export of
m0's checkpoint is an ONNX model that OpenCV's dnn and the onnx checker
(tests/export/check_export.py) run on the data's test split, agreeing with
numpy, more than 70% correct.

Usage: walk_systemd.py SOURCE_DIR RECKON_WORKER RECKONCTL   (root: network
namespaces; exit 77, skipped, without it)
"""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_common  # noqa: E402
from deploy_common import run  # noqa: E402

sys.stdout.reconfigure(line_buffering=True)
src, worker, reckonctl = sys.argv[1:4]
PY = "/usr/bin/python3"  # Debian's: numpy, onnx, opencv (deploy/install-deps.sh)
MACHINES = 4
TAG = f"rw{os.getpid() % 100000}"
SUBNET = "10.77.41"


def guide():
    return open(os.path.join(src, "docs/guide-deploy.md")).read()


def guide_variables():
    """The variables the guide's systemd section tells the user to set."""
    text = guide()
    section = text[text.index("## Cloud GPU machines (systemd)"):text.index("## Docker Compose")]
    return set(re.findall(r"`(RECKON_[A-Z_]+)[`=]", section))


def example_env():
    return deploy_common.example_env(os.path.join(src, "deploy/systemd/worker.env"))


class Machine:
    def __init__(self, i, work):
        self.i, self.name, self.ns = i, f"m{i}", f"{TAG}m{i}"
        self.address = f"{SUBNET}.{10 + i}"
        self.root = os.path.join(work, self.name)  # its /var/lib/reckon
        os.makedirs(os.path.join(self.root, "0"))
        self.proc, self.lives = None, 0

    def network(self, bridge):
        veth = f"{TAG}v{self.i}"
        run(["ip", "netns", "add", self.ns])
        run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", self.ns])
        run(["ip", "link", "set", veth, "master", bridge, "up"])
        run(["ip", "-n", self.ns, "addr", "add", f"{self.address}/24", "dev", "eth0"])
        run(["ip", "-n", self.ns, "link", "set", "eth0", "up"])
        run(["ip", "-n", self.ns, "link", "set", "lo", "up"])
        os.makedirs(f"/etc/netns/{self.ns}", exist_ok=True)
        with open(f"/etc/netns/{self.ns}/hosts", "w") as f:
            f.write("127.0.0.1 localhost\n")
            for j in range(MACHINES):
                f.write(f"{SUBNET}.{10 + j} m{j}\n")

    def env(self, data_dir):
        """worker.env as the guide says to edit it for this machine."""
        values = example_env()
        peers = [f"m{j}:7070" for j in range(MACHINES) if j != self.i]
        values.update(RECKON_NODE_ID=f"w{self.i}", RECKON_SHARD=f"{self.i}/{MACHINES}",
                      RECKON_PEERS=",".join(peers), RECKON_ADVERTISE=f"{self.address}:7070",
                      RECKON_DATA_DIR=data_dir, RECKON_BACKEND="cpu")
        # The test's short run, after the example's flags (later flags win).
        # 40 epochs: 12 took 5 s here, so short that all four were not
        # always seen training before m2 had ended.
        values["RECKON_FLAGS"] += (" --layers 784,64,10 --epochs 40 --threads 1"
                                   " --eval-samples 2000 --join-timeout-s 120")
        return values

    def start(self, data_dir):
        self.lives += 1
        log = open(os.path.join(self.root, f"life{self.lives}.log"), "w")
        cmd = deploy_common.exec_start(
            os.path.join(src, "deploy/systemd/reckon-worker@.service"), self.env(data_dir),
            worker, self.root)
        self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, *cmd], stdout=log,
                                     stderr=subprocess.STDOUT, cwd=os.path.join(self.root, "0"))

    def status(self):
        try:
            with urllib.request.urlopen(f"http://{self.address}:9464/status", timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def log(self):
        return open(os.path.join(self.root, f"life{self.lives}.log")).read()

    def summary(self):
        return json.load(open(os.path.join(self.root, "0", "summary.json")))


def wait(what, predicate, seconds, log=lambda: ""):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    sys.exit(f"timed out waiting for {what}\n{log()[-4000:]}")


def main():
    if os.geteuid() != 0:
        print("SKIPPED: the walk needs root (network namespaces)")
        return 77
    wanted = {"RECKON_NODE_ID", "RECKON_SHARD", "RECKON_PEERS", "RECKON_ADVERTISE",
              "RECKON_DATA_DIR", "RECKON_FLAGS", "RECKON_BACKEND"}
    said, shipped = guide_variables(), set(example_env())
    assert wanted <= said, f"the guide does not say to set {wanted - said}"
    assert said <= shipped, f"the guide names {said - shipped}, not in worker.env"
    export_line = next(l.strip() for l in guide().splitlines()
                       if l.strip().startswith("reckonctl export --checkpoint /var/lib/reckon/0/"))
    work = tempfile.mkdtemp(prefix="reckon-walk-")
    bridge = f"{TAG}br"
    machines = [Machine(i, work) for i in range(MACHINES)]
    try:
        data = os.path.join(work, "my-dataset")
        run([PY, os.path.join(src, "tests/export/fashion_to_npy.py"), data])
        run(["ip", "link", "add", bridge, "type", "bridge"])
        run(["ip", "addr", "add", f"{SUBNET}.1/24", "dev", bridge])
        run(["ip", "link", "set", bridge, "up"])
        for m in machines:
            m.network(bridge)
        t0 = time.time()
        for m in machines:
            m.start(data)
        # m2 stopped mid-training, as `systemctl stop reckon-worker@0` would,
        # once each machine has been seen training. Seen one by one, not all
        # in one poll: /status is cached for a second and a short run on a
        # loaded machine left no poll that caught all four (a CI failure).
        m2 = machines[2]
        steps = lambda m: int((m.status() or {}).get("local_steps", 0) or 0)
        seen = set()

        def all_seen_training():
            assert m2.proc.poll() is None, \
                f"m2 ended (exit {m2.proc.poll()}) before all four were seen training " \
                f"(seen: {sorted(seen)}): the run is too short to stop it midway\n{m2.log()}"
            seen.update(m.name for m in machines if m.name not in seen and steps(m) > 30)
            return len(seen) == MACHINES

        wait("all four training", all_seen_training, 180, m2.log)
        m2.proc.send_signal(signal.SIGTERM)  # to `ip netns exec`: it execs the worker
        code = m2.proc.wait(timeout=60)
        assert code == 3, f"m2 stopped mid-training exited {code}, not 3:\n{m2.log()}"
        assert os.path.getsize(os.path.join(m2.root, "0", "checkpoint")) > 0
        print(f"m2 stopped after {time.time() - t0:.1f} s: exit 3, checkpoint saved")
        m2.start(data)  # systemctl start: a new incarnation re-joins
        for m in machines:
            try:
                code = m.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                sys.exit(f"{m.name} did not end:\n{m.log()[-3000:]}")
            assert code == 0, f"{m.name} exited {code}:\n{m.log()[-3000:]}"
        summaries = {m.name: m.summary() for m in machines}
        hashes = {name: s["weight_hash"] for name, s in summaries.items()}
        assert len(set(hashes.values())) == 1, f"replicas differ: {hashes}"
        assert all(s["final"] for s in summaries.values()), "a summary is not the final replica"
        assert "snapshot from" in m2.log() or "joining by replay" in m2.log(), \
            f"m2's second life did not join from the others:\n{m2.log()}"
        accuracy = summaries["m0"]["test_accuracy"]
        print(f"four machines, one replica {hashes['m0'][:16]} after {time.time() - t0:.1f} s; "
              f"test accuracy {accuracy:.4f}")
        # The guide's export line, m0's /var/lib/reckon being its folder here.
        model = os.path.join(work, "model.onnx")
        words = shlex.split(export_line.replace("/var/lib/reckon", machines[0].root))
        words = [reckonctl] + words[1:]
        words[words.index("--out") + 1] = model
        run(words)
        npz = os.path.join(work, "model.npz")
        run([reckonctl, "export", "--checkpoint", os.path.join(machines[0].root, "0/checkpoint"),
             "--format", "npz", "--out", npz])
        checked = json.loads(run([PY, os.path.join(src, "tests/export/check_export.py"), model,
                                  npz, data]).strip().splitlines()[-1])
        print(f"the guide's export: {checked['onnx_correct']} of {checked['samples']} right "
              f"in OpenCV's dnn, {checked['predictions_shared']} predictions shared with numpy")
        assert checked["weight_hash"] == hashes["m0"], (checked["weight_hash"], hashes["m0"])
        assert checked["onnx_correct"] > 0.7 * checked["samples"], checked
    finally:
        for m in machines:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.kill()
            subprocess.run(["ip", "netns", "delete", m.ns], capture_output=True)
            shutil.rmtree(f"/etc/netns/{m.ns}", ignore_errors=True)
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    print("the systemd walk: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
