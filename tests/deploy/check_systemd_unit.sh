#!/usr/bin/env bash
# deploy/systemd: `systemd-analyze verify` accepts the template unit as an
# instance (with ExecStart pointed at the built binary: verify checks that it
# exists); the command line it runs, read from the unit's own ExecStart and
# expanded as systemd does with the example environment file's values (%i the
# GPU index, ${VAR} one word, $VAR split at spaces), is one reckon-worker
# accepts; and a worker whose data is missing exits with a code the unit's
# RestartPreventExitStatus names (it was restarted every 5 s for ever).
# The run is one step of a cluster of one on this machine: the example's
# peers are not reachable here (a later --peers "" takes them away; its
# port 7070 may be taken: --listen 127.0.0.1:0), its GPU backend and data
# folder are not here either
# (RECKON_BACKEND=cpu, RECKON_DATA_DIR=Fashion-MNIST), and /var/lib/reckon
# is a scratch folder.
# Usage: check_systemd_unit.sh SOURCE_DIR RECKON_WORKER (absolute paths)
set -euo pipefail
src=$1
worker=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unit="$src/deploy/systemd/reckon-worker@.service"

sed "s|/usr/local/bin/reckon-worker|$worker|" "$unit" > "$work/reckon-worker@0.service"
systemd-analyze verify "$work/reckon-worker@0.service"
echo "systemd-analyze verify reckon-worker@0: ok"

# The instance's command line, as systemd would run it
# (tests/deploy/deploy_common.py), with the example file's values and the
# overrides given.
exec_line() {
  python3 "$src/tests/deploy/deploy_common.py" "$unit" "$src/deploy/systemd/worker.env" \
    "$worker" "$work" "$@"
}
mkdir -p "$work/0"
mapfile -d '' -t cmd < <(exec_line RECKON_BACKEND=cpu \
                         RECKON_DATA_DIR=/usr/share/datasets/fashion-mnist)
"${cmd[@]}" --peers "" --listen 127.0.0.1:0 --max-steps 1 --layers 784,16,10 --eval-samples 100 \
  --http-listen 127.0.0.1:0 > "$work/out" 2>&1 || { cat "$work/out"; exit 1; }
grep -q '"steps": 1' "$work/0/summary.json"
test -s "$work/0/checkpoint"
echo "the unit's command line runs, its summary and checkpoint where the unit keeps them: ok"

# The example's own data folder is not here: the worker says so once and
# exits with a code the unit does not restart.
mapfile -d '' -t cmd < <(exec_line RECKON_BACKEND=cpu)
set +e
"${cmd[@]}" --peers "" --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 > "$work/out" 2>&1
code=$?
set -e
grep -q "does not exist" "$work/out" || { cat "$work/out"; exit 1; }
prevent=$(sed -n 's/^RestartPreventExitStatus=//p' "$unit")
[[ " $prevent " == *" $code "* ]] || {
  echo "missing data exits $code; the unit restarts on it (RestartPreventExitStatus=$prevent)"
  exit 1
}
echo "missing data: exit $code, which the unit does not restart ($prevent): ok"
