#!/usr/bin/env bash
# deploy/compose.yaml brought up with podman-compose (Debian's 1.0.3, which
# has no profiles: the services are named, Grafana left out as its profile
# would): three workers train a short run and end with one replica (identical
# weight hashes), Prometheus scrapes all three (up == 1), `podman stop` of a
# worker (SIGTERM)
# exits 0 well within the grace period while the other two serve on, and
# `podman-compose down` leaves nothing running.
# The Compose file and its training flags are used as they are; the test
# appends to a copy of the flags file (later flags win) to shorten the run.
# Usage: check_compose.sh SOURCE_DIR     Needs root (exit 77: skipped).
set -euo pipefail
src=$1
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED: the Compose test needs root (rootful podman)"
  exit 77
fi
project=reckoncompose$$
work=$(mktemp -d)
compose() { (cd "$work/deploy" && podman-compose -p "$project" "$@"); }
cleanup() {
  compose down -v > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

"$src/deploy/podman-setup.sh"
# chroot isolation for the RUN steps, as in check_image.sh (why there).
(cd "$src" && podman build --isolation chroot --format docker -f deploy/Dockerfile -t reckon:cpu . &&
  podman build --isolation chroot --format docker -f deploy/compose/prometheus.Dockerfile \
    -t reckon-prometheus deploy/compose) > "$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log"; exit 1; }

# The deploy files as shipped, beside the dashboards they mount.
cp -r "$src/deploy" "$src/dashboards" "$work/"
cat >> "$work/deploy/compose/training.flags" <<'FLAGS'
# check_compose.sh: a short run
--layers=784,64,10
--epochs=1
--eval-samples=2000
FLAGS
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export RECKON_PROMETHEUS_PORT=$port
compose up -d --no-build worker-0 worker-1 worker-2 prometheus > "$work/up.log" 2>&1 ||
  { cat "$work/up.log"; exit 1; }

container() { echo "${project}_$1_1"; }
# podman-compose's container names, as docs/guide-deploy.md gives them (its
# `exec` prints its command line on stdout).
summary() { podman exec "$(container "$1")" cat /var/lib/reckon/summary.json 2> /dev/null; }
for w in worker-0 worker-1 worker-2; do
  for _ in $(seq 600); do summary "$w" > /dev/null && break; sleep 0.5; done
  summary "$w" > "$work/$w.json" || { podman logs "$(container "$w")"; exit 1; }
done
python3 - "$work" <<'PY'
import json, sys
for w in ("worker-0", "worker-1", "worker-2"):
    v = json.load(open(f"{sys.argv[1]}/{w}.json"))
    assert v["epochs"] == 1 and v["test_accuracy"] > 0.6, (w, v["epochs"], v["test_accuracy"])
PY
# One replica. Not the summaries' hashes: podman-compose starts the services
# one after another, and a worker that joins after the others finished
# trains on while they serve (each summary is its replica when it finished).
# The live replicas, once the last one has finished, are one.
hashes() {
  for w in worker-0 worker-1 worker-2; do
    podman exec "$(container "$w")" curl -fsS http://127.0.0.1:9464/status |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["weight_hash"])'
  done
}
for _ in $(seq 100); do [ "$(hashes | sort -u | wc -l)" = 1 ] && break; sleep 0.2; done
[ "$(hashes | sort -u | wc -l)" = 1 ] || { hashes; echo "the three replicas differ"; exit 1; }
one=$(hashes | sort -u)
echo "three workers, one replica: weights ${one:0:16}"

# Prometheus scrapes the three workers by service name.
up() { curl -fsS "http://127.0.0.1:$port/api/v1/query?query=up" 2> /dev/null; }
for _ in $(seq 120); do
  up | python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; sys.exit(0 if len(r)==3 and all(x["value"][1]=="1" for x in r) else 1)' && break
  sleep 0.5
done
up | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
up = {x["metric"]["instance"]: x["value"][1] for x in r}
assert up == {"worker-0:9464": "1", "worker-1:9464": "1", "worker-2:9464": "1"}, up
print("Prometheus: up == 1 for", ", ".join(sorted(up)))'

# A healthy cluster refuses nobody for good, and nobody for now once it
# has formed. Each worker's seeds resolve to the others' IPs while they
# advertise their names: those second addresses were dialed and refused
# every 2 s for ever (the refusals counted then in
# reckon_peers_refused_total, the ReckonRefusals alert fired). Twice the
# longest dial backoff.
refused() {  # "<for good> <for now>", summed over the workers
  for w in worker-0 worker-1 worker-2; do
    podman exec "$(container "$w")" curl -fsS http://127.0.0.1:9464/metrics
  done | awk '/^reckon_peers_refused_total/ { good += $NF }
              /^reckon_peers_refused_for_now_total/ { now += $NF }
              END { print good + 0, now + 0 }'
}
refused_before=$(refused)
sleep 5
refused_after=$(refused)
[ "$refused_before" = "$refused_after" ] && [ "${refused_after%% *}" = 0 ] || {
  podman logs "$(container worker-0)" 2>&1 | grep -e refus | tail -5
  echo "peers refused (for good, for now) went from $refused_before to $refused_after in 5 s of a healthy cluster"
  exit 1
}
echo "a healthy cluster refuses nobody: refused for good, for now: $refused_after, steady for 5 s"

# SIGTERM to one worker: it leaves the cluster and exits 0; the others serve on.
stop_start=$(date +%s%N)
podman stop -t 60 "$(container worker-2)" > /dev/null
stop_ms=$(( ($(date +%s%N) - stop_start) / 1000000 ))
code=$(podman inspect --format '{{.State.ExitCode}}' "$(container worker-2)")
[ "$code" = 0 ] || { podman logs "$(container worker-2)"; echo "worker-2 exited $code"; exit 1; }
echo "podman stop worker-2: exit 0 after $stop_ms ms (grace period 60 s)"
for w in worker-0 worker-1; do
  podman exec "$(container "$w")" curl -fsS http://127.0.0.1:9464/readyz > /dev/null ||
    { echo "$w is not ready after worker-2 left"; exit 1; }
done
for _ in $(seq 100); do
  podman exec "$(container worker-0)" curl -fsS http://127.0.0.1:9464/status |
    python3 -c '
import json, sys
members = {m["node_id"]: m for m in json.load(sys.stdin).get("members", [])}
sys.exit(0 if members.get("worker-2", {}).get("state") == "left" else 1)' && break
  sleep 0.2
done
podman exec "$(container worker-0)" curl -fsS http://127.0.0.1:9464/status > "$work/status.json"
python3 - "$work/status.json" <<'PY' || {
import json, sys
states = {m["node_id"]: m["state"] for m in json.load(open(sys.argv[1]))["members"]}
assert states.get("worker-2") == "left" and states.get("worker-1") == "alive", states
print("worker-0 and worker-1 serve on; worker-0 sees", states)
PY
  # What each side said of the other: the leave, the links, the verdicts.
  echo "--- worker-0 on worker-2:"
  podman logs "$(container worker-0)" 2>&1 | grep -e worker-2 | tail -40
  echo "--- worker-2's last lines:"
  podman logs "$(container worker-2)" 2>&1 | tail -40
  exit 1
}

compose down > /dev/null 2>&1

# deploy/compose-host.yaml (one worker of a cluster over several hosts), as
# the guide's .env gives it: the ports published and the worker's flags.
cat > "$work/deploy/.env" <<'ENV'
RECKON_NODE_ID=w1
RECKON_SHARD=1/4
RECKON_PEERS=10.0.0.10:7070,10.0.0.12:7070
RECKON_ADVERTISE=10.0.0.11:7070
ENV
(cd "$work/deploy" && podman-compose --dry-run -p "${project}host" -f compose-host.yaml up -d) \
  > "$work/host.log" 2>&1 || { cat "$work/host.log"; exit 1; }
for want in "-p 7070:7070" "-p 9464:9464" "--node-id=w1" "--shard=1/4" \
            "--advertise=10.0.0.11:7070" "/usr/share/datasets/fashion-mnist:/data:ro"; do
  grep -qF -- "$want" "$work/host.log" || { cat "$work/host.log"; echo "no $want"; exit 1; }
done
podman volume rm "${project}host_worker" > /dev/null 2>&1 || true
podman network rm "${project}host_default" > /dev/null 2>&1 || true
echo "compose-host.yaml: ports 7070 and 9464 published, the .env's worker"

left=$(podman ps -a --filter "label=io.podman.compose.project=$project" --format '{{.Names}}')
[ -z "$left" ] || { echo "left after down: $left"; exit 1; }
echo "podman-compose down: nothing left"
