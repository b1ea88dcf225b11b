#!/bin/bash
# tests/gpu/check-bare.sh: the device run's pack checked on the CPU. In a
# bare debian:bookworm container (no -dev packages, no Fashion-MNIST, no
# NVIDIA driver: deploy/podman-setup.sh makes the image from Debian's
# archive), tests/gpu/run.sh must find every library the pack needs, start
# every program, and say "no GPU". Run tests/gpu/pack.sh first. Not in the
# suite: the pack's CUDA Release build takes about 15 minutes here.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$root/.gpu-pack/programs.tar.gz" ] || { echo "check-bare.sh: run tests/gpu/pack.sh first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
set +e
podman run --rm --runtime runc --network none -v "$root:/src:ro" -v "$out:/out" \
  docker.io/library/debian:bookworm /src/tests/gpu/run.sh /out 60 > "$out/stdout" 2>&1
rc=$?
set -e
cat "$out/stdout"
if [ "$rc" -ne 0 ] || ! grep -q "^no GPU: " "$out/stdout" || ! grep -Eq "([0-9]+) of \1 programs started" "$out/stdout"; then
  echo "check-bare.sh: FAILED (exit $rc): the pack must start every program and say no GPU" >&2
  exit 1
fi
echo "check-bare.sh: the pack starts in a bare debian:bookworm and says no GPU"
