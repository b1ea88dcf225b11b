#!/usr/bin/env bash
# The whole test suite, from a clean checkout (after deploy/install-deps.sh):
#   1. Release build with gcc, -Werror, CUDA compiled when nvcc is present:
#      unit, command-line, multi-process gossip and fault-scenario tests.
#   2. clang build with ASan + UBSan: the same tests again (the fault
#      scenarios excepted), then each libFuzzer
#      target for RECKON_FUZZ_SECONDS (default 30) seconds.
# GPU tests skip with a printed reason where no GPU is found.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${RECKON_FUZZ_SECONDS:-30}

# Line tables only (-g1): what backtraces, gdb's bt and the sanitizers'
# reports need. Full debug info made the gcc build a third longer (764 s
# against 582 s on 2 cores, 2026-11-28), and the clang build again.
line_tables="-O2 -g1 -DNDEBUG"
# Unity builds (CMake batches of 8 sources a translation unit, the gRPC,
# protobuf, Abseil and gtest headers parsed once a batch): from clean, the
# gcc tree in 312 s instead of 618 s, the clang tree in 293 s, on 2 cores
# (2026-12-03); the two builds were about 19 of the suite's 45 minutes
# (2026-12-03, a144156). Names in two sources'
# anonymous namespaces (tests included) must differ: a clash fails here.
# A source that compiles only because a batch-mate included what it uses
# is caught by the plain build of docs' "Building by hand", not here.
unity="-DCMAKE_UNITY_BUILD=ON"

echo "== build (gcc, -Werror) =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRECKON_WERROR=ON "$unity" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$line_tables" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$line_tables"
cmake --build build -j "$jobs"
echo "== tests =="
ctest --test-dir build -j "$jobs" --output-on-failure

echo "== build (clang, ASan + UBSan, libFuzzer) =="
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$unity" \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$line_tables" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$line_tables" \
  -DRECKON_WERROR=ON -DRECKON_SANITIZE=ON -DRECKON_FUZZ=ON -DRECKON_CUDA=OFF \
  -DRECKON_FUZZ_SECONDS="$fuzz_seconds"
cmake --build build-sanitize -j "$jobs"
echo "== tests under ASan + UBSan (all but the fault scenarios, the image and other tools' checks) =="
# The fault scenarios (label fault: minutes of real training each) check
# behaviour and ran above; the same code paths run under the sanitizers in
# the unit, node and cluster tests. The container image and Compose tests
# (label image) build the image from the source tree whatever the build:
# run again here they would be the same test (about a minute, serial).
# The checks made by other tools (a real Prometheus against the dashboards
# and rules, promtool, kubectl kustomize, systemd-analyze) test those
# files, not reckon's memory: the same test again, about 2.5 minutes here;
# so is the systemd walk (WalkFourMachinesTheSystemdWay: the unit's command
# on four machines, whose code the cluster tests run under the sanitizers).
# reckonctl local and the HTTP endpoint run under the sanitizers in the
# other ReckonctlLocal, Monitoring and HttpEndpoint tests. Workers under a
# memory limit (WorkersTrainOnNumpyDataLargerThanTheirMemoryLimit) measure
# memory, which ASan's shadow and quarantine multiply: the mapped dataset's
# code runs under the sanitizers in the NpyDataset tests.
echo "skipped under ASan + UBSan: the fault scenarios, the image tests, the checks of" \
     "Prometheus, promtool, Kubernetes and systemd files, the systemd walk, and workers under a memory limit" \
     "(ran in the gcc build above)"
ctest --test-dir build-sanitize -j "$jobs" --output-on-failure -LE "fuzz|fault|image" \
  -E "RealPrometheusScrapes|PrometheusWatchesTheCluster|PromtoolChecks|KubernetesManifests|SystemdUnit|WalkFourMachines|LargerThanTheirMemoryLimit"
echo "== fuzz targets, ${fuzz_seconds}s each =="
ctest --test-dir build-sanitize --output-on-failure -L fuzz
echo "== all tests passed =="
