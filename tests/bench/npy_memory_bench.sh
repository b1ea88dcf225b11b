#!/bin/bash
# tests/bench/npy_memory_bench.sh [LAYERS] [STEPS] [ROUNDS]: a NumPy dataset
# read in memory against memory-mapped (issue 35; docs/benchmarks.md "A
# dataset larger than memory"). One standalone worker on 512 MB of uint8
# features (800,000 samples of 640, made once in /tmp/reckon-npy-bench with
# Debian's numpy), one epoch of STEPS steps, each way:
#
#   memory   --data-in-memory: the splits read whole as floats (2.4 GB)
#   mapped   mapped, the files in the page cache
#   cold     mapped, the page cache dropped first
#   limited  mapped, the page cache dropped, the worker in a memory cgroup
#            of 128 MiB (v1): a quarter of the data fits
#
# and prints each run's samples a second, its weight hash (the same every
# way) and its peak RSS. Needs root (drop_caches, the cgroup) and a built
# tree (build/worker/reckon-worker). Defaults: 640,512,512,10, 1000, 2.
# With FIGURES (a fourth argument), each run's figures are appended to that
# file, one JSON object a line (`reckonctl bench show --from FIGURES`).
# WORKER=PATH runs another build's worker (BUILD=NAME labels its lines):
# two builds side by side, alternating, with two calls a round
# (FIRST_ROUND=N numbers the call's first round).
set -euo pipefail
layers=${1:-640,512,512,10}
steps=${2:-1000}
rounds=${3:-2}
figures=${4:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
worker=${WORKER:-$root/build/worker/reckon-worker}
data=/tmp/reckon-npy-bench
[ "$(id -u)" -eq 0 ] || { echo "npy_memory_bench.sh: needs root (drop_caches, a memory cgroup)" >&2; exit 1; }
[ -x "$worker" ] || { echo "npy_memory_bench.sh: build first ($worker is missing)" >&2; exit 1; }
memory_cgroup=/sys/fs/cgroup/memory$(grep ':memory:' /proc/self/cgroup | cut -d: -f3)
[ -w "$memory_cgroup" ] || { echo "npy_memory_bench.sh: no v1 memory cgroup at $memory_cgroup" >&2; exit 1; }

if [ ! -f "$data/test_y.npy" ]; then
  mkdir -p "$data"
  /usr/bin/python3 - "$data" << 'PY'
import sys
import numpy as np
out = sys.argv[1]
rng = np.random.default_rng(2)
def split(name, n):
    y = (np.arange(n) % 10).astype(np.int64)
    x = rng.integers(0, 64, size=(n, 640), dtype=np.uint8)
    for c in range(10):
        x[y == c, c * 60:c * 60 + 20] += 100
    np.save(f"{out}/{name}_x.npy", x)
    np.save(f"{out}/{name}_y.npy", y)
split("train", 800000)
split("test", 2000)
PY
fi

common=(--standalone --data-dir "$data" --layers "$layers" --epochs 1 --max-steps "$steps"
        --http-listen 127.0.0.1:0)
cgroup=$memory_cgroup/reckon-npy-bench-$$
trap 'rmdir "$cgroup" 2> /dev/null || true' EXIT

report() {  # report NAME SUMMARY [EXTRA]
  FIGURES="$figures" LAYERS="$layers" STEPS="$steps" ROUND="$round" BUILD="${BUILD:-}" \
    python3 - "$@" << 'PY'
import json, os, sys
name, path = sys.argv[1], sys.argv[2]
extra = sys.argv[3] if len(sys.argv) > 3 else ""
j = json.load(open(path))
print(f"{name:8} {j['samples_per_s']:9.0f} samples/s  weights {j['weight_hash'][:12]}  "
      f"peak RSS {j['max_rss_bytes'] / 2**20:5.0f} MiB{extra}")
if os.environ["FIGURES"]:
    with open(os.environ["FIGURES"], "a") as f:
        line = {"build": os.environ["BUILD"]} if os.environ["BUILD"] else {}
        f.write(json.dumps({**line, "way": name, "round": int(os.environ["ROUND"]),
                            "layers": os.environ["LAYERS"], "steps": int(os.environ["STEPS"]),
                            "samples_per_s": j["samples_per_s"], "weight_hash": j["weight_hash"],
                            "max_rss_bytes": j["max_rss_bytes"]}) + "\n")
PY
}
run() {  # run NAME FLAGS...
  local name=$1
  shift
  "$worker" "${common[@]}" --summary-json "/tmp/npy-bench-$name.json" "$@" > /dev/null 2>&1
  report "$name" "/tmp/npy-bench-$name.json"
}

echo "layers $layers, $steps steps, $(nproc) cores; 512 MB of features"
first_round=${FIRST_ROUND:-1}
for round in $(seq "$first_round" $((first_round + rounds - 1))); do
  run memory --data-in-memory
  run mapped
  sync && echo 3 > /proc/sys/vm/drop_caches
  run cold
  sync && echo 3 > /proc/sys/vm/drop_caches
  mkdir -p "$cgroup"
  echo $((128 << 20)) > "$cgroup/memory.limit_in_bytes"
  sh -c "echo \$\$ > $cgroup/cgroup.procs && exec \"\$0\" \"\$@\"" "$worker" "${common[@]}" \
    --summary-json /tmp/npy-bench-limited.json > /dev/null 2>&1
  report limited /tmp/npy-bench-limited.json "  (at the 128 MiB limit $(cat "$cgroup/memory.failcnt") times)"
  rmdir "$cgroup"
done
