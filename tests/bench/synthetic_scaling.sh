#!/usr/bin/env bash
# docs/scaling.md's node-count table: a full mesh of synthetic members
# (reckon-worker --synthetic) on loopback at each node count, one line of
# gossip figures per count (reckonctl local prints it; ctl/gossip_figures.h).
# Usage: synthetic_scaling.sh [NODE COUNTS...]   (default: 8 16 32 64)
# Extra reckonctl/worker flags: SYNTHETIC_FLAGS="--synthetic-rate 2 ...".
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(8 16 32 64)
flags=${SYNTHETIC_FLAGS:-"--synthetic-updates 2000 --synthetic-rate 5 --max-steps 50"}
for n in "${counts[@]}"; do
  work=$(mktemp -d)
  # shellcheck disable=SC2086  # the flags are words
  if "$root/build/ctl/reckonctl" local --workers "$n" --layers 784,256,10 --synthetic $flags \
      --work-dir "$work" --summary-json "$work/local.json" > "$work/local.out" 2>&1; then
    grep -E "^(gossip|replicas):" "$work/local.out"
  else
    echo "$n nodes: failed; the last lines of reckonctl local:"
    grep -v "^w[0-9]* *\(step\|starting\)" "$work/local.out" | tail -5
  fi
  rm -rf "$work"
done
