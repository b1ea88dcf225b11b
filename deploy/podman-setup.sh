#!/usr/bin/env bash
# Makes a Debian 12 machine (as root) ready to build and run reckon's image
# with podman, with no container registry reachable. Idempotent: each step is
# skipped when its result is already there.
#
#   1. podman, runc, podman-compose and mmdebstrap from Debian's archive.
#   2. /etc/containers/containers.conf: no default ulimits (podman's defaults
#      fail here with "setrlimit EPERM") and cgroupfs as the cgroup manager
#      (no systemd as PID 1 in a CI machine), and runc as the runtime (crun
#      fails on this kernel: "cgroups in hybrid mode not supported").
#   3. The base image docker.io/library/debian:bookworm, made from Debian's
#      archive with mmdebstrap (minbase) and `podman import`ed under the name
#      the Dockerfile pulls, so no pull is ever tried.
#
# A machine that can reach Docker Hub needs only step 1 (or Docker itself).
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "podman-setup: run as root (podman here runs rootful)" >&2
  exit 1
fi

"$(dirname "$0")/install-deps.sh" --containers

conf=/etc/containers/containers.conf
if ! grep -q '^default_ulimits = \[\]' "$conf" 2>/dev/null; then
  if [ -e "$conf" ]; then
    echo "podman-setup: $conf exists without 'default_ulimits = []'; add under [containers]:" >&2
    echo '  default_ulimits = []   and under [engine]: cgroup_manager = "cgroupfs"' >&2
    exit 1
  fi
  mkdir -p /etc/containers
  cat > "$conf" <<'EOF'
# Written by reckon's deploy/podman-setup.sh.
[containers]
default_ulimits = []

[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
EOF
  echo "podman-setup: wrote $conf"
fi

base=docker.io/library/debian:bookworm
if podman image exists "$base"; then
  echo "podman-setup: $base present"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "podman-setup: making $base with mmdebstrap (minbase, from Debian's archive)"
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
  mmdebstrap --quiet --variant=minbase bookworm "$work/bookworm.tar" ${mirror:+"$mirror"}
  podman import --change 'CMD ["bash"]' "$work/bookworm.tar" "$base"
  echo "podman-setup: imported $base"
fi
