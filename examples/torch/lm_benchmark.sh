#!/usr/bin/env bash
# The transformer LM comparison of docs/benchmarks.md (issue 52), from one
# command: examples/torch/lm.py's four ways on loopback and behind the
# network lab's 100 Mbit/s and 1 Gbit/s links with 10 ms one-way delay
# (root: `reckonctl lab`), then DDP and reckon again under bf16 autocast on
# loopback; then the plot and the table (examples/torch/plot_lm.py).
#
#   examples/torch/lm_benchmark.sh [OUT_DIR] [lm.py flags...]
#
# OUT_DIR (default lm-runs) gets the runs' JSON lines (runs.jsonl), the
# picture (lm.png) and the Markdown table (printed, and kept beside them). About
# 80 minutes on a 2-core VM. Needs the build (cmake --build build) for
# PYTHONPATH=build/python and build/ctl/reckonctl, or reckon installed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-lm-runs}"
shift || true
mkdir -p "$out"
export PYTHONPATH="${PYTHONPATH:-$root/build/python}"
reckonctl="${RECKONCTL:-$root/build/ctl/reckonctl}"
python=/usr/bin/python3
common=(--workers 4 --steps 200 --warmup 20 --eval-every 25 --diloco-h 10,50 --lr 2e-3 --tau 2e-3 --tau-lr 4
        --reckonctl "$reckonctl" --out "$out/runs.jsonl" "$@")
"$python" "$here/lm.py" "${common[@]}" --runs ddp,diloco,reckon,reckon-lr \
  --links "loopback;rate=100mbit,delay=10ms;rate=1gbit,delay=10ms"
"$python" "$here/lm.py" "${common[@]}" --runs ddp,reckon-lr --autocast bf16
"$python" "$here/plot_lm.py" "$out/runs.jsonl" --png "$out/lm.png" --table | tee "$out/table"
