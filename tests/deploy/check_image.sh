#!/usr/bin/env bash
# The container image (deploy/Dockerfile), built and run with podman as a
# user would (docs/guide-deploy.md): it builds from a fresh machine (set-up
# included, timed), trains a short standalone run whose summary lands on a
# volume, runs as the non-root user, its HEALTHCHECK command succeeds when
# run by hand (`podman healthcheck run` needs systemd timers, absent here),
# it holds no compiler, and `podman stop` (SIGTERM) ends a worker with 0
# well within the grace period.
# Usage: check_image.sh SOURCE_DIR     Needs root (exit 77: skipped).
set -euo pipefail
src=$1
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED: the image test needs root (rootful podman)"
  exit 77
fi
image=reckon:cpu
name=reckon-image-test
work=$(mktemp -d)
trap 'podman rm -f -t 0 "$name" > /dev/null 2>&1 || true; rm -rf "$work"' EXIT

start=$(date +%s)
"$src/deploy/podman-setup.sh"
setup_done=$(date +%s)
# The guide's build command, with RUN steps in chroot isolation instead of
# podman's default (oci: each RUN under runc). The steps and the image are
# the same; the build stage's compile took 243-253 s under oci and 169 s in
# chroot on the 2-core test machine (2026-12-06; 167 s in `podman run`, 151
# s on the host), most of the test's time.
(cd "$src" && podman build --isolation chroot --format docker -f deploy/Dockerfile -t "$image" .) \
  > "$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log"; exit 1; }
built=$(date +%s)
echo "set-up $((setup_done - start)) s, image build $((built - setup_done)) s" \
     "(a second build reuses cached layers)"
podman image inspect --format 'image size {{.Size}} bytes' "$image"

# A short standalone run; its summary on a volume.
mkdir "$work/out" && chmod 0777 "$work/out"
podman run --rm --no-healthcheck -v "$work/out:/out" "$image" --standalone --max-steps 20 \
  --layers 784,32,10 --eval-samples 500 --progress off --summary-json /out/summary.json \
  > "$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
python3 - "$work/out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["steps"] == 20, s["steps"]
assert s["test_accuracy"] > 0.3, s["test_accuracy"]
assert len(s["weight_hash"]) == 64, s["weight_hash"]
print("standalone run in the container: 20 steps, test accuracy %.2f" % s["test_accuracy"])
PY
[ "$(stat -c %u "$work/out/summary.json")" = 10001 ] || { echo "summary not written by uid 10001"; exit 1; }

# No compiler in the runtime image.
if podman run --rm --no-healthcheck --entrypoint sh "$image" -c 'command -v c++ cc cmake'; then
  echo "the runtime image holds a compiler"; exit 1
fi

# A worker that serves after training: non-root, healthy, stops with 0 on SIGTERM.
podman run -d --name "$name" --no-healthcheck "$image" --standalone --max-steps 5 \
  --layers 784,16,10 --eval-samples 100 --progress off --after-training serve > /dev/null
for _ in $(seq 100); do
  podman logs "$name" 2>&1 | grep -q "serving until SIGTERM" && break
  sleep 0.2
done
podman logs "$name" 2>&1 | grep -q "serving until SIGTERM" || { podman logs "$name"; exit 1; }
uid=$(podman exec "$name" sh -c 'awk "/^Uid:/ {print \$2}" /proc/1/status')
user=$(podman exec "$name" id -un)
gid=$(podman exec "$name" id -g)
[ "$uid" = 10001 ] && [ "$gid" = 10001 ] && [ "$user" = reckon ] ||
  { echo "worker runs as uid $uid gid $gid ($user)"; exit 1; }
echo "the worker runs as $user (uid $uid, gid $gid: the Kubernetes manifests' runAsUser/fsGroup)"
# The image's HEALTHCHECK, as podman would run it.
health=$(podman image inspect --format '{{json .Config.Healthcheck.Test}}' "$image")
mapfile -t health_cmd < <(python3 -c 'import json,sys; t=json.loads(sys.argv[1]); assert t[0]=="CMD", t; print("\n".join(t[1:]))' "$health")
podman exec "$name" "${health_cmd[@]}"
echo "HEALTHCHECK (${health_cmd[*]}): ok"
stop_start=$(date +%s%N)
podman stop -t 60 "$name" > /dev/null
stop_ms=$(( ($(date +%s%N) - stop_start) / 1000000 ))
code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
[ "$code" = 0 ] || { podman logs "$name"; echo "exit code $code after podman stop"; exit 1; }
podman logs "$name" 2>&1 | grep -q "stopped by a signal" || { podman logs "$name"; exit 1; }
echo "podman stop: exit 0 after $stop_ms ms (grace period 60 s)"
