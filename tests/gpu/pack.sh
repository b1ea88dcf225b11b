#!/bin/bash
# tests/gpu/pack.sh: a Release build with CUDA of this checkout, packed for a
# GPU machine that has the NVIDIA driver, CUDA and Python but none of
# Debian's -dev packages or libraries (the lent device machines: docs/cuda.md
# "A device run in minutes"). Writes .gpu-pack/ at the repository's root
# (ignored by git; name it in the device run's `carry`):
#
#   programs.tar.gz  (gzip: every machine has it)
#     bin/  reckon-worker, reckonctl and the GPU test programs, stripped
#     python/reckon/  the Python package, its module built for the device's
#           Python (3.12: RECKON_GPU_PYTHON, default pyenv's 3.12.1 here)
#           and tests/torch/ beside it (torch_tests/, with
#           tests/bench/torch_step_cost.py and examples/torch/lm.py's
#           transformer), for reckon.torch with CUDA tensors
#     lib/  every shared library they load that such a machine lacks (gRPC,
#           protobuf, Abseil, OpenBLAS, ...: what ldd resolves, less the C
#           library, the C++ runtime and the driver, which it has; cuBLAS
#           is loaded at run time from the machine's CUDA, as everywhere)
#   data/     Fashion-MNIST, from Debian's dataset-fashion-mnist (gzipped)
#   MANIFEST  the commit, the date and what is in it
#
# tests/gpu/run.sh runs it there. Built for sm_90 only (H100, H200): the
# kernels of one architecture keep the programs small.
#
# Usage: tests/gpu/pack.sh        (RECKON_GPU_BUILD: the build folder,
#                                  default build-gpu; RECKON_GPU_ARCH: 90;
#                                  RECKON_GPU_PYTHON: see python/ above)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${RECKON_GPU_BUILD:-$root/build-gpu}
arch=${RECKON_GPU_ARCH:-90}
# The device machines' python3 is 3.12 (/work/.library/device/KINDS.md):
# the module is built against a 3.12's headers; pyenv has one here.
python=${RECKON_GPU_PYTHON:-$HOME/.pyenv/versions/3.12.1/bin/python3}
pack=$root/.gpu-pack
data=/usr/share/datasets/fashion-mnist
# The pack travels with the working tree, 64 MiB in all (the device tool's
# limit): this leaves the tree 5 (its tracked files were 2.8 MiB on
# 2026-11-28; the pack 55.2, 28.8 of them Fashion-MNIST).
max_pack_mib=59

command -v nvcc > /dev/null || { echo "pack.sh: nvcc not found: a CUDA build needs it" >&2; exit 1; }
[ -r "$data/train-images-idx3-ubyte.gz" ] ||
  { echo "pack.sh: no Fashion-MNIST at $data (apt-get install dataset-fashion-mnist)" >&2; exit 1; }

# Warnings are not errors here: at -O3 GCC 12 reports a false -Wrestrict in
# libstdc++'s char_traits (ctl/compare_command.cc); CI's -O2 build keeps
# -Werror on the same code.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRECKON_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DRECKON_WERROR=OFF -DRECKON_PYTHON="$python" \
  > /tmp/reckon-gpu-configure.log 2>&1 ||
  { cat /tmp/reckon-gpu-configure.log >&2; exit 1; }
programs=(worker/reckon-worker ctl/reckonctl tests/cuda_backend_test tests/cuda_device_test
          tests/cublas_loader_test tests/cuda_flat_replica_test tests/flat_peer_test)
targets=()
for p in "${programs[@]}"; do targets+=("$(basename "$p")"); done
[ -x "$python" ] && targets+=(_reckon)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
[ -f "$build/cuda/libreckon_cuda.a" ] || { echo "pack.sh: the build has no CUDA backend" >&2; exit 1; }

stage=$build/pack-stage
rm -rf "$pack" "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$pack/data"
for p in "${programs[@]}"; do
  install -m 755 "$build/$p" "$stage/bin/"
  strip --strip-unneeded "$stage/bin/$(basename "$p")"
done
libraries_of=("$stage"/bin/*)
if [ -x "$python" ]; then
  mkdir -p "$stage/python"
  cp -r "$build/python/reckon" "$stage/python/"
  cp -r "$root/tests/torch" "$stage/python/torch_tests"
  cp "$root/tests/bench/torch_step_cost.py" "$root/examples/torch/lm.py" \
     "$root/examples/torch/launch.py" "$stage/python/torch_tests/"
  strip --strip-unneeded "$stage"/python/reckon/_reckon*.so
  libraries_of+=("$stage"/python/reckon/_reckon*.so)
else
  echo "pack.sh: no $python: the pack has no Python module (RECKON_GPU_PYTHON)" >&2
fi

# What the machine has: the C library (glibc 2.36 here; newer there), the
# C++ runtime (GCC 12's here; newer there, and cuBLAS needs its own), the
# driver. Everything else ldd resolves goes in.
provided='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s|libcuda|libnvidia)[.-]'
for p in "${libraries_of[@]}"; do
  ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  name=$(basename "$lib")
  [[ $name =~ $provided ]] && continue
  cp -L "$lib" "$stage/lib/$name"
done
missing=$(for p in "${libraries_of[@]}"; do ldd "$p" | grep "not found" || true; done)
[ -z "$missing" ] || { echo "pack.sh: unresolved libraries:" >&2; echo "$missing" >&2; exit 1; }
strip --strip-unneeded "$stage"/lib/* 2> /dev/null || true
tar -C "$stage" -cf - bin lib $([ -d "$stage/python" ] && echo python) | gzip -9 > "$pack/programs.tar.gz"
cp "$data"/*-ubyte.gz "$pack/data/"

{
  echo "commit $(git -C "$root" rev-parse HEAD)$(git -C "$root" diff --quiet HEAD || echo ' (with uncommitted changes)')"
  echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "cuda $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), sm_$arch"
  echo "programs: $(cd "$stage/bin" && echo *)"
  echo "python: $([ -d "$stage/python" ] && (cd "$stage/python/reckon" && echo _reckon*.so) || echo none)"
  echo "libraries: $(ls "$stage/lib" | wc -l), $(du -sm "$stage" | cut -f1) MiB unpacked"
} > "$pack/MANIFEST"

size_mib=$(du -sm "$pack" | cut -f1)
echo "pack.sh: $pack, $size_mib MiB ($(ls "$stage/lib" | wc -l) libraries)"
if [ "$size_mib" -gt "$max_pack_mib" ]; then
  echo "pack.sh: over $max_pack_mib MiB: the device run carries at most 64 MiB with the tree" >&2
  du -sm "$stage"/bin/* "$stage"/lib/* | sort -n | tail -8 >&2
  exit 1
fi
