#!/usr/bin/env bash
# deploy/systemd: `systemd-analyze verify` accepts the unit (with ExecStart
# pointed at the built binary: verify checks that it exists), and the
# command line it runs, with the example environment file's values, is one
# reckon-worker accepts (one standalone step: the peers of the example are
# not reachable here, so a later --peers "" takes theirs away, as
# --standalone refuses peers).
# Usage: check_systemd_unit.sh SOURCE_DIR RECKON_WORKER (absolute paths)
set -euo pipefail
src=$1
worker=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

sed "s|/usr/local/bin/reckon-worker|$worker|" "$src/deploy/systemd/reckon-worker.service" \
  > "$work/reckon-worker.service"
systemd-analyze verify "$work/reckon-worker.service"
echo "systemd-analyze verify: ok"

# The ExecStart line, expanded as systemd does: ${VAR} one word, $VAR split.
set -a
# shellcheck disable=SC1091
. "$src/deploy/systemd/worker.env"
set +a
# shellcheck disable=SC2086
"$worker" --node-id "$RECKON_NODE_ID" --peers "$RECKON_PEERS" --shard "$RECKON_SHARD" \
  --summary-json "$work/summary.json" --progress off $RECKON_FLAGS \
  --peers "" --standalone --max-steps 1 --layers 784,16,10 --eval-samples 100 \
  --http-listen 127.0.0.1:0 \
  > "$work/out" 2>&1 || { cat "$work/out"; exit 1; }
grep -q '"steps": 1' "$work/summary.json"
echo "the unit's command line runs: ok"
