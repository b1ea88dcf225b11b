#!/usr/bin/env bash
# Installs the packages reckon needs, from the distribution's archive only.
#   install-deps.sh           everything to build, test and run (the README's
#                             test command; CI)
#   install-deps.sh --build   only what building reckon-worker and reckonctl
#                             needs (the image's build stage, deploy/Dockerfile)
#   install-deps.sh --containers
#                             only podman and its tools (deploy/podman-setup.sh)
# Debian 12 (bookworm) is what CI runs. Ubuntu 24.04 (noble, the CUDA 13
# images' base) has every package under the same name, in universe (enabled
# in Ubuntu's images); only its versions differ (clang 18 instead of 14,
# Boost 1.83 instead of 1.74), and its runtime libraries carry a "t64"
# suffix, which deploy/runtime-packages.sh finds by itself. Idempotent:
# packages already present are left as they are. Needs root (or sudo).
set -euo pipefail

profile=all
case "${1:-}" in
  "") ;;
  --build) profile=build ;;
  --containers) profile=containers ;;
  *) echo "usage: install-deps.sh [--build | --containers]" >&2; exit 2 ;;
esac

. /etc/os-release
case "$ID:${VERSION_ID:-}" in
  debian:12 | ubuntu:24.04) ;;
  *) echo "install-deps: $PRETTY_NAME is untested; trying the Debian 12 package names" >&2 ;;
esac

# The image build and Compose (deploy/podman-setup.sh configures them).
container_packages=(
  podman runc podman-compose mmdebstrap uidmap containernetworking-plugins
  golang-github-containernetworking-plugin-dnsname  # service names resolve in Compose networks
)

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config
  # libraries (docs/design.md "Dependencies")
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev
  libboost-dev                      # Asio + Beast: the HTTP endpoint
  prometheus-cpp-dev                # metrics registry and text exposition
  libgtest-dev libgmock-dev         # CMake configures the tests too
  nlohmann-json3-dev                # base/json.h: every JSON reckon writes or reads
  libzstd-dev zlib1g-dev
  libssl-dev                        # SHA-256 (weight hashes)
  libopenblas-dev
  libonnx-dev                       # reckonctl export: ONNX models built and checked
)
if [ "$profile" = all ]; then
  packages+=(
    git
    clang libclang-rt-dev           # libFuzzer + ASan/UBSan runtimes for the fuzz targets
    # data: Fashion-MNIST IDX files under /usr/share/datasets/fashion-mnist
    dataset-fashion-mnist
    # tools used by tests
    python3 ca-certificates
    iproute2                        # `ip netns` for the partition and bad-link tests
    strace                          # the checkpoint's fsync, rename, fsync on the real system calls
    prometheus                      # the monitoring test scrapes a cluster; promtool checks dashboards/
    systemd                         # systemd-analyze verify of deploy/systemd
    gnuplot-nox                     # reckonctl compare --chart draws accuracy against bytes
    # the export test runs the exported model in other runtimes: OpenCV's
    # dnn (ONNX), numpy (.npz), the onnx package's checker (Debian's python3)
    python3-numpy python3-onnx python3-opencv
    # reckon for PyTorch (python/): the module and its tests
    pybind11-dev python3-dev python3-torch
    python3-venv python3-setuptools # `pip install ./python` into a venv, offline
    # the transformer LM comparison (examples/torch/lm.py): English text
    # (WordNet's glosses) and its plot (examples/torch/plot_lm.py)
    wordnet-base python3-matplotlib
    "${container_packages[@]}"      # the deploy tests: image, Compose
  )
  # The Kubernetes manifests' schema check (tests/deploy) runs on Node.js:
  # Debian's, unless a newer one is already there.
  command -v npm > /dev/null || packages+=(nodejs npm)
fi
[ "$profile" = containers ] && packages=("${container_packages[@]}")

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
