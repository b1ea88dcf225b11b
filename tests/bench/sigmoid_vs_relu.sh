#!/usr/bin/env bash
# docs/training.md "Deep sigmoid networks": five hidden layers of 256, sigmoid
# against ReLU, on Fashion-MNIST, alone and as a 4-worker cluster, with each
# recipe's chosen learning rate. One line per run: model, recipe, where,
# test accuracy, compression against dense fp32, replicas.
# Usage: sigmoid_vs_relu.sh [EPOCHS [SEED [RECIPE...]]]   (default 10, seed 1,
# every recipe below; a RECIPE is "activation|flags")
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
epochs=${1:-10}
seed=${2:-1}
layers=784,256,256,256,256,256,10
recipes=(
  "relu|--lr 0.02"
  "sigmoid|--lr 0.1 --warmup-steps 100"
  "sigmoid|--lr 0.1 --pretrain-samples 6000 --warmup-batch 25"
  "relu|--optimizer adagrad --lr 0.01"
  "sigmoid|--optimizer adagrad --lr 0.01"
)
if [ $# -gt 2 ]; then recipes=("${@:3}"); fi
printf '| hidden units | recipe | run | test accuracy | compression | replicas |\n'
printf '| --- | --- | --- | ---: | ---: | --- |\n'
for recipe in "${recipes[@]}"; do
  activation=${recipe%%|*}
  flags=${recipe#*|}
  work=$(mktemp -d)
  # shellcheck disable=SC2086  # the flags are words
  "$root/build/worker/reckon-worker" --standalone --layers "$layers" --activation "$activation" \
      $flags --seed "$seed" --epochs "$epochs" --summary-json "$work/alone.json" > "$work/alone.out" 2>&1
  alone=$(python3 -c "import json,sys; s=json.load(open(sys.argv[1]));
print('%.2f%% | %.0fx' % (100*s['test_accuracy'], s['compression_ratio']))" "$work/alone.json")
  printf '| %s | `%s` | alone | %s | - |\n' "$activation" "$flags" "$alone"
  # shellcheck disable=SC2086
  "$root/build/ctl/reckonctl" local --workers 4 --layers "$layers" --activation "$activation" \
      $flags --seed "$seed" --epochs "$epochs" --work-dir "$work/cluster" > "$work/cluster.out" 2>&1
  cluster=$(sed -n 's/^cluster: 4 workers, test accuracy \([0-9.]*%\).*(\([0-9]*x\) less).*/\1 | \2/p' \
      "$work/cluster.out")
  replicas=$(sed -n 's/^replicas: \([a-z]*\).*/\1/p' "$work/cluster.out")
  printf '| %s | `%s` | 4 workers | %s | %s |\n' "$activation" "$flags" "$cluster" "$replicas"
  rm -rf "$work"
done
