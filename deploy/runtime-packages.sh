#!/usr/bin/env bash
# Prints, one per line, the packages that provide the shared libraries the
# given binaries load (ldd, then dpkg -S): what the image's runtime stage
# installs, so the two stages agree on every distribution (Debian 12's
# libgrpc++1.51 is Ubuntu 24.04's libgrpc++1.51t64) without a second list.
# libcuda.so.1 comes from the host's driver at run time (the NVIDIA
# container toolkit mounts it) and is left out, as are the CUDA runtime's
# libraries under /usr/local/cuda*: the CUDA runtime base image has them.
# Usage: runtime-packages.sh BINARY...
set -euo pipefail

loads=$(ldd "$@")
libraries=$(awk '$2 == "=>" && $3 ~ /^\// { print $3 }' <<< "$loads" | sort -u)
missing=$(awk '$2 == "=>" && $3 == "not" { print $1 }' <<< "$loads" | grep -v '^libcuda\.so' || true)
if [ -n "$missing" ]; then
  echo "runtime-packages: not found: $missing" >&2
  exit 1
fi

for lib in $libraries; do
  # With merged /usr, dpkg may know a library under /lib or /usr/lib.
  real=$(readlink -f "$lib")
  case "$real" in
    /usr/local/cuda*) echo "runtime-packages: $lib: from the CUDA base image" >&2; continue ;;
  esac
  found=
  for path in "$lib" "$real" "/usr$lib" "/usr$real" "${lib#/usr}" "${real#/usr}"; do
    if owner=$(dpkg -S "$path" 2> /dev/null); then
      found=${owner%%:*}
      break
    fi
  done
  if [ -z "$found" ]; then
    echo "runtime-packages: no package owns $lib" >&2
    exit 1
  fi
  echo "$found"
done | sort -u
