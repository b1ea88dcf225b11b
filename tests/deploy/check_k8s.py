#!/usr/bin/env python3
"""deploy/k8s: every overlay renders with `kubectl kustomize`, validates
offline against the Kubernetes schemas (tests/deploy/k8s/validate.mjs: types,
required fields, misspelt fields, and that the pieces refer to each other),
and the worker container's rendered arguments are ones reckon-worker
accepts: each pod of the StatefulSet is run as the kubelet would (its $(VAR)
references expanded from its env, its ConfigMap and Secret mounts as files)
for one step, in a network namespace of its own where the headless Service's
name resolves to loopback, then stopped with SIGTERM like a deleted pod.

Usage: check_k8s.py SOURCE_DIR RECKON_WORKER RECKONCTL
Running the pods needs root (network namespaces); without it, exit 77
(skipped) after the renders are validated."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_common import run  # noqa: E402

sys.stdout.reconfigure(line_buffering=True)

src, worker, reckonctl = sys.argv[1:4]
work = tempfile.mkdtemp(prefix="reckon-k8s-")


def validator():
    """The validator and its pinned packages (npm registry), in `work`."""
    if shutil.which("kubectl") is None:
        sys.exit("kubectl (1.32, with kustomize 5.5) is not installed: it renders deploy/k8s")
    dest = os.path.join(work, "validate")
    os.makedirs(dest)
    for f in ("package.json", "package-lock.json", "validate.mjs"):
        shutil.copy(os.path.join(src, "tests/deploy/k8s", f), dest)
    run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=dest)
    return os.path.join(dest, "validate.mjs")


def guide_overlay():
    """The user's overlay as docs/guide-deploy.md writes it (the indented block
    after "Your overlay"): the test renders and runs that text, no copy."""
    text = open(os.path.join(src, "docs/guide-deploy.md")).read()
    after = text[text.index("Your overlay, say `my-cluster/kustomization.yaml`"):]
    lines = after.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("    "))
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    return "\n".join(block).strip() + "\n"


def render_all():
    """Renders of every overlay, and of the guide's overlay of a user."""
    tree = os.path.join(work, "k8s")
    shutil.copytree(os.path.join(src, "deploy/k8s"), tree)
    mine = os.path.join(tree, "my-cluster")
    os.makedirs(mine)
    with open(os.path.join(mine, "kustomization.yaml"), "w") as f:
        f.write(guide_overlay())
    folders = {v: os.path.join(tree, "overlays", v)
               for v in sorted(os.listdir(os.path.join(tree, "overlays")))}
    folders["my-cluster"] = mine
    renders = {}
    for variant, folder in folders.items():
        out = os.path.join(work, f"{variant}.yaml")
        with open(out, "w") as f:
            f.write(run(["kubectl", "kustomize", folder]))
        renders[variant] = out
    return renders


def expand(text, env):
    """$(VAR) as the kubelet expands it in args: defined variables only."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: env.get(m.group(1), m.group(0)), text)


def pod_files(pod, ordinal, pod_dir, certs):
    """The pod's volumes as directories; mount path -> directory."""
    mounts = {}
    for mount in pod["mounts"]:
        # Not in volumes: a volumeClaimTemplate's claim, empty at first.
        volume = next((v for v in pod["volumes"] if v["name"] == mount["name"]), {})
        d = os.path.join(pod_dir, mount["name"])
        os.makedirs(d)
        if "configMap" in volume:
            for key, value in pod["configMaps"][volume["configMap"]["name"]].items():
                with open(os.path.join(d, key), "w") as f:
                    f.write(value)
        elif volume.get("persistentVolumeClaim", {}).get("claimName") == "reckon-data":
            # The user's data on the claim (components/data): Fashion-MNIST.
            fashion = "/usr/share/datasets/fashion-mnist"
            for name in os.listdir(fashion):
                os.symlink(os.path.join(fashion, name), os.path.join(d, name))
        elif "secret" in volume:  # reckon-cluster, as docs/guide-deploy.md makes it
            with open(os.path.join(d, "cluster.flags"), "w") as f:
                f.write("--cluster-token=k8s-test-token\n")
            for name in os.listdir(certs):
                shutil.copy(os.path.join(certs, name), d)
        mounts[mount["mountPath"]] = d
    return mounts


def pod_env(pod, ordinal):
    name = f"{pod['name']}-{ordinal}"
    env = {}
    for e in pod["env"]:
        ref = e.get("valueFrom", {})
        if "value" in e:
            env[e["name"]] = e["value"]
        elif ref.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = name
        elif ref.get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[e["name"]] = "127.0.0.1"
        elif "apps.kubernetes.io/pod-index" in ref.get("fieldRef", {}).get("fieldPath", ""):
            env[e["name"]] = str(ordinal)
        elif "configMapKeyRef" in ref:
            key = ref["configMapKeyRef"]
            env[e["name"]] = pod["configMaps"][key["name"]][key["key"]]
        else:
            sys.exit(f"env {e['name']}: this test does not know how to set it")
    return name, env


def start_pod(variant, pod, ordinal, certs):
    name, env = pod_env(pod, ordinal)
    pod_dir = os.path.join(work, variant, name)
    os.makedirs(pod_dir)
    mounts = pod_files(pod, ordinal, pod_dir, certs)
    args = []
    for a in pod["args"]:
        a = expand(a, env)
        for mount_path, d in mounts.items():
            a = re.sub(re.escape(mount_path) + r"(?=/|$)", lambda _: d, a)
        args.append(a)
    # A network namespace of its own: its own loopback (every pod listens on
    # 7070), and /etc/hosts (ip netns exec binds /etc/netns/NS/hosts) where the
    # Service's and the pod's names are loopback.
    ns = f"reckonk8s{os.getpid()}{variant.replace('-', '')}{ordinal}"
    os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
    with open(f"/etc/netns/{ns}/hosts", "w") as f:
        f.write(f"127.0.0.1 localhost reckon-peers {name}\n")
    run(["ip", "netns", "add", ns])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    log = open(os.path.join(pod_dir, "log"), "w")
    proc = subprocess.Popen(["ip", "netns", "exec", ns, worker, *args, "--max-steps=1"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=pod_dir)
    return {"name": name, "ns": ns, "proc": proc, "log": os.path.join(pod_dir, "log"),
            "args": args, "dir": pod_dir}


def check_pod(variant, p, gpu):
    """Trains its step and serves on until SIGTERM, then exits 0; or, for the
    GPU overlay on a machine without one, fails only for want of a GPU."""
    deadline = time.time() + 120
    text = ""
    while time.time() < deadline:
        text = open(p["log"]).read()
        if "serving until SIGTERM" in text or p["proc"].poll() is not None:
            break
        time.sleep(0.2)
    if gpu and p["proc"].poll() == 4 and "cuda" in text.lower():
        print(f"{variant} {p['name']}: arguments accepted; no GPU here: "
              f"{text.strip().splitlines()[-1]}")
        return
    if "serving until SIGTERM" not in text:
        p["proc"].kill()
        sys.exit(f"{variant} {p['name']}: {' '.join(p['args'])}\n{text}")
    p["proc"].send_signal(signal.SIGTERM)  # to `ip netns exec`, which is the worker (exec)
    code = p["proc"].wait(timeout=60)
    if code != 0:
        sys.exit(f"{variant} {p['name']}: exit {code} after SIGTERM\n{open(p['log']).read()}")
    summary = json.load(open(os.path.join(p["dir"], "state", "summary.json")))
    assert summary["steps"] == 1 and summary["node_id"] == p["name"], summary
    print(f"{variant} {p['name']}: 1 step, served, SIGTERM -> exit 0; shard "
          f"{next(a for a in p['args'] if a.startswith('--shard='))[8:]}")


def main():
    validate = validator()
    renders = render_all()
    pods = {}
    for variant, rendered in renders.items():
        pod_json = os.path.join(work, f"{variant}.pod.json")
        print(run(["node", validate, rendered, "--pod", pod_json]).strip())
        pods[variant] = json.load(open(pod_json))
    # Optional parts are optional: the plain overlays carry no PodMonitor (a
    # cluster without the Prometheus Operator refuses one) and no claim; a
    # user's overlay sets the worker count once and the shards follow.
    for variant in ("cpu", "gpu"):
        text = open(renders[variant]).read()
        assert "kind: PodMonitor" not in text and "reckon-data" not in text, variant
    assert pods["cpu"]["replicas"] == 3, pods["cpu"]["replicas"]
    assert pods["my-cluster"]["replicas"] == 4, pods["my-cluster"]["replicas"]
    mine = open(renders["my-cluster"]).read()
    assert "reckon-data" in mine and "--tls-ca=" in mine and "kind: PodMonitor" in mine, \
        "the guide's overlay lost a component"
    print("components: no PodMonitor or data claim unless added; the guide's overlay: "
          "shards=4 -> 4 replicas, TLS, the data claim, the PodMonitor")
    gpu = pods["gpu"]["resources"]["limits"].get("nvidia.com/gpu")
    cpu = pods["cpu"]["resources"]["limits"].get("nvidia.com/gpu")
    assert gpu == "1" and cpu is None, (gpu, cpu)
    print("resources: nvidia.com/gpu 1 in the GPU overlay, none in the CPU overlay")
    if os.geteuid() != 0:
        print("SKIPPED: running the pods' arguments needs root (network namespaces)")
        return 77
    certs = os.path.join(work, "certs")
    names = ",".join(f"reckon-{i}" for i in range(max(p["replicas"] for p in pods.values())))
    run([reckonctl, "certs", "--out", certs, "--nodes", names])
    for variant, pod in pods.items():
        started = [start_pod(variant, pod, i, certs) for i in range(pod["replicas"])]
        try:
            for p in started:
                check_pod(variant, p, "nvidia.com/gpu" in pod["resources"]["limits"])
        finally:
            for p in started:
                if p["proc"].poll() is None:
                    p["proc"].kill()
                subprocess.run(["ip", "netns", "delete", p["ns"]], capture_output=True)
                shutil.rmtree(f"/etc/netns/{p['ns']}", ignore_errors=True)
    return 0


try:
    code = main()
finally:
    shutil.rmtree(work, ignore_errors=True)
sys.exit(code)
