#!/usr/bin/env bash
# Reproduces the training figures in docs/benchmarks.md: the dense
# single-worker baseline, threshold mode over a sweep of tau (accuracy against
# compression, like Table 3 of Strom 2015), and the CPU training FLOP/s
# against sgemm on the same shapes. Takes about 10 minutes on 2 cores.
#   usage: tests/bench/train_benchmarks.sh [OUT_DIR] [TAU ...]
# Every run's summary also goes, one a line, to OUT_DIR/figures.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench-results}
shift || true
taus=("$@")
[ ${#taus[@]} -gt 0 ] || taus=(0.002 0.003 0.005 0.01 0.02)
worker=build/worker/reckon-worker
ctl=build/ctl/reckonctl
[ -x "$worker" ] && [ -x "$ctl" ] || { echo "build first: cmake -S . -B build -G Ninja && cmake --build build" >&2; exit 2; }
mkdir -p "$out"
# The default recipe (README): every flag spelled out so the figures do not
# drift if a default changes.
recipe=(--layers 784,512,512,10 --activation relu --optimizer momentum --lr 0.02
        --momentum 0.9 --lr-schedule halve --halve-after 6 --batch 100 --epochs 10 --seed 1
        --backend cpu --progress off)

echo "== dense baseline"
"$worker" --standalone --codec dense "${recipe[@]}" --summary-json "$out/dense.json"
for tau in "${taus[@]}"; do
  echo "== threshold tau=$tau"
  "$worker" --standalone --codec threshold --threshold "$tau" "${recipe[@]}" \
    --summary-json "$out/threshold-$tau.json"
done
echo "== threshold, tau steered to density 1e-3"
"$worker" --standalone --codec threshold --threshold 0.005 --target-density 0.001 "${recipe[@]}" \
  --summary-json "$out/controlled-0.001.json"
echo "== training FLOP/s against sgemm"
"$ctl" bench train --codec dense --json > "$out/bench-train-dense.json"
"$ctl" bench train --codec threshold --threshold 0.005 --json > "$out/bench-train-threshold.json"

python3 - "$out" "${taus[@]}" <<'PY'
import json, sys
out, taus = sys.argv[1], sys.argv[2:]
# Every run's summary, one a line with its name: OUT_DIR/figures.jsonl, which
# `reckonctl bench show --from` prints again (docs/benchmarks.md keeps it).
with open(f"{out}/figures.jsonl", "w") as figures:
    named = [("dense", "dense.json")] + [(f"threshold {tau}", f"threshold-{tau}.json") for tau in taus]
    named += [("steered to density 1e-3", "controlled-0.001.json"),
              ("bench train dense", "bench-train-dense.json"),
              ("bench train threshold", "bench-train-threshold.json")]
    for name, file in named:
        figures.write(json.dumps({"run": name, **json.load(open(f"{out}/{file}"))}) + "\n")
dense = json.load(open(f"{out}/dense.json"))
print(f"\ndense baseline: test accuracy {100*dense['test_accuracy']:.2f}%, "
      f"{dense['samples_per_s']:.0f} samples/s, weights {dense['weight_hash'][:16]}")
print("\n| tau | test accuracy | vs dense (points) | update density | bits/update | compression (dense fp32 / wire) |")
print("|---|---|---|---|---|---|")
runs = [(f"{tau}", f"{out}/threshold-{tau}.json") for tau in taus]
runs.append(("steered to density 1e-3", f"{out}/controlled-0.001.json"))
for tau, path in runs:
    t = json.load(open(path))
    bits = 8 * t["wire_bytes"] / max(1, t["updates_sent"])
    print(f"| {tau} | {100*t['test_accuracy']:.2f}% | {100*(t['test_accuracy']-dense['test_accuracy']):+.2f} "
          f"| {t['update_density']:.2e} | {bits:.1f} | {t['compression_ratio']:.0f}x |")
for mode in ("dense", "threshold"):
    b = json.load(open(f"{out}/bench-train-{mode}.json"))
    print(f"\nbench train ({mode}): step {b['step_ms']:.2f} ms, {b['train_flops_per_s']:.3g} FLOP/s; "
          f"sgemm alone {b['gemm_ms']:.2f} ms, {b['sgemm_flops_per_s']:.3g} FLOP/s; ratio {b['ratio']:.2f}x (target >= 0.6x)")
PY
