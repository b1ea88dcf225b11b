#!/usr/bin/env bash
# Installs every Debian 12 package reckon needs to build, test and run.
# Idempotent: packages already present are left as they are. Needs root (or sudo).
# The Dockerfile runs this same script, so a package added here reaches the image too.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  clang libclang-rt-14-dev          # libFuzzer + ASan/UBSan runtimes for the fuzz targets
  # libraries (docs/design.md "Dependencies")
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev
  libboost-dev                      # Asio + Beast: the HTTP endpoint
  prometheus-cpp-dev                # metrics registry and text exposition
  libgtest-dev libgmock-dev
  nlohmann-json3-dev                # base/json.h: every JSON reckon writes or reads
  libzstd-dev zlib1g-dev
  libssl-dev                        # SHA-256 (weight hashes)
  libopenblas-dev
  # data: Fashion-MNIST IDX files under /usr/share/datasets/fashion-mnist
  dataset-fashion-mnist
  # tools used by tests
  python3 ca-certificates
  iproute2                          # `ip netns` for the partition and bad-link tests
  prometheus                        # the monitoring test scrapes a cluster; promtool checks dashboards/
  systemd                           # systemd-analyze verify of deploy/systemd
)

if [ "$(id -u)" -ne 0 ]; then
  sudo_cmd=sudo
else
  sudo_cmd=
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
