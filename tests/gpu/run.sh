#!/bin/bash
# tests/gpu/run.sh OUT [BUDGET_S]: the device run (docs/cuda.md "A device run
# in minutes"). On a GPU machine, from the pack tests/gpu/pack.sh made: every
# GPU test, `reckonctl bench gpu --json`, training on the GPU (alone, four
# workers sharing it, Strom's network), and compute-sanitizer's memcheck and
# racecheck, most telling first, each under a timeout, all within BUDGET_S
# seconds (default 480: a device call may run 600). Writes to OUT:
#
#   OUT/summary.md  one row a step: exit status, seconds, the figure it gave
#   bench_gpu.json  reckonctl bench gpu --json
#   bench_inbound.json  reckonctl bench inbound --json (every core of the host)
#   absorbing_gpu.json  the same bench's training section on the GPU (Strom's
#                   network absorbing 8 peers)
#   bench_codec.json  reckonctl bench codec --json (the host's core, no GPU)
#   bench_train_dense.json  reckonctl bench train --codec dense --json (no GPU)
#   logs.tar.gz     every step's log, gtest's JSON and the workers' summaries
#
# and prints OUT/summary.md last. Without a GPU (or without the pack's
# libraries resolving) it checks that every program starts, says "no GPU"
# and why, and stops: exit 0 when everything started, 1 otherwise. With a
# GPU: exit 1 when a step failed.
#
# RECKON_GPU_STEPS=REGEX runs only the steps whose names match (bash =~),
# for a second, shorter call: the others are listed as skipped.
#
# RECKON_GPU_DRY_RUN=1 runs every step without a GPU, training on the CPU
# backend for 300 steps: the script itself checked on the CPU, so that a
# mistake in it does not cost device time (the GPU steps fail or skip).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pack=${RECKON_GPU_PACK:-$root/.gpu-pack}
out=${1:?usage: tests/gpu/run.sh OUT [BUDGET_S]}
budget_s=${2:-480}
mkdir -p "$out/logs"
logs=$out/logs
summary=$out/summary.md
started=$(date +%s)
failed=0

[ -f "$pack/programs.tar.gz" ] || { echo "run.sh: no pack at $pack (tests/gpu/pack.sh makes it)" >&2; exit 1; }
unpacked=$(mktemp -d "${TMPDIR:-/tmp}/reckon-gpu-pack.XXXXXX")
trap 'rm -rf "$unpacked"' EXIT
gzip -dc "$pack/programs.tar.gz" | tar -C "$unpacked" -xf - ||
  { echo "run.sh: $pack/programs.tar.gz does not unpack" >&2; exit 1; }

# cuBLAS is loaded at run time (cuda/cublas_api.h) from the machine's CUDA:
# the toolkit's folders, or the wheels PyTorch brought.
cuda_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && cuda_libs="$cuda_libs:$d"
done
for d in $(find /usr/local /opt /usr/lib -maxdepth 9 -name 'libcublas.so.*' -printf '%h\n' 2> /dev/null | sort -u); do
  cuda_libs="$cuda_libs:$d"
done
# compute-sanitizer is in the toolkit's bin.
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
export LD_LIBRARY_PATH="$unpacked/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$unpacked/bin
export RECKON_WORKER=$bin/reckon-worker RECKON_DATA_DIR=$pack/data

{
  echo "# Device run, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  sed 's/^/    /' "$pack/MANIFEST"
  echo "    machine: $(uname -n), $(nproc) cores, $(. /etc/os-release 2> /dev/null; echo "${PRETTY_NAME:-unknown}")"
  echo "    cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2> /dev/null | head -1)"
  echo
  echo "| step | exit | seconds | result |"
  echo "| --- | ---: | ---: | --- |"
} > "$summary"

# step NAME LIMIT_S RESULT_CMD -- COMMAND...: runs COMMAND (its output in
# logs/NAME.log) under min(LIMIT_S, what is left of the budget); RESULT_CMD
# (a shell snippet reading $log) says what it gave in a few words.
step() {
  local name=$1 limit=$2 result_cmd=$3
  shift 4
  local log=$logs/$name.log left=$((budget_s - ($(date +%s) - started)))
  if [ -n "${RECKON_GPU_STEPS:-}" ] && ! [[ $name =~ $RECKON_GPU_STEPS ]]; then
    echo "| $name | - | - | skipped: not in RECKON_GPU_STEPS |" >> "$summary"
    return
  fi
  if [ "$left" -lt 20 ]; then
    echo "| $name | - | - | not run: the budget of ${budget_s} s is spent |" >> "$summary"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0 rc result ms
  t0=$(date +%s%N)
  timeout -k 10 "$limit" "$@" > "$log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  result=$(log=$log bash -c "$result_cmd" 2> /dev/null | head -c 300 | tr '\n|' '  ')
  [ "$rc" -eq 124 ] && result="timed out after ${limit} s. $result"
  [ "$rc" -ne 0 ] && failed=1
  printf '| %s | %s | %d.%d | %s |\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000 / 100)) "$result" >> "$summary"
}

gtest_result='grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$log" | tr "\n" " "; grep -E "^\[  FAILED  \] [A-Za-z]" "$log" | head -5 | tr "\n" " "'
json_field() {  # json_field FILE KEY...: the first of KEYS the JSON file has
  python3 - "$@" << 'PY' 2> /dev/null || true
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"no summary ({e.__class__.__name__})"); sys.exit()
def show(v):
    return f"{v:.4g}" if isinstance(v, float) else str(v)
print(", ".join(f"{k} {show(j[k])}" for k in sys.argv[2:] if k in j))
PY
}
export -f json_field

# Every program starts: the pack's libraries resolve on this machine.
step starts 30 'grep -c "started" "$log" | sed "s/$/ of 7 programs started/"' -- bash -c "
  for p in reckon-worker reckonctl; do $bin/\$p --help > /dev/null 2>&1 && echo \"\$p started\" || { echo \"\$p did not start:\"; $bin/\$p --help 2>&1 | head -3; }; done
  for t in cuda_device_test cublas_loader_test cuda_backend_test cuda_flat_replica_test flat_peer_test; do $bin/\$t --gtest_list_tests > /dev/null 2>&1 && echo \"\$t started\" || { echo \"\$t did not start:\"; $bin/\$t --gtest_list_tests 2>&1 | head -3; }; done"
grep -q "did not start" "$logs/starts.log" && failed=1

# Is there a GPU? The device probe's own words (cuda/device.h) when not.
gpu_why=""
if ! command -v nvidia-smi > /dev/null; then
  gpu_why="nvidia-smi not found (no NVIDIA driver)"
elif ! nvidia-smi -L > "$logs/nvidia-smi.log" 2>&1 || ! grep -q "^GPU " "$logs/nvidia-smi.log"; then
  gpu_why="nvidia-smi lists no GPU: $(head -1 "$logs/nvidia-smi.log")"
fi
step device_tests 60 "$gtest_result" -- "$bin/cuda_device_test" --gtest_output="json:$logs/cuda_device_test.json"

backend=cuda
short=()
if [ "${RECKON_GPU_DRY_RUN:-0}" = 1 ]; then
  echo "| dry run | - | - | RECKON_GPU_DRY_RUN=1: every step runs; training on the CPU backend, 300 steps (${gpu_why:-a GPU is there}) |" >> "$summary"
  gpu_why="" backend=cpu short=(--max-steps 300)
fi
if [ -n "$gpu_why" ]; then
  echo "| gpu | - | - | no GPU: $gpu_why; the device tests skip (above), nothing else runs |" >> "$summary"
  tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
  cat "$summary"
  echo "no GPU: $gpu_why"
  exit $failed
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >> "$logs/nvidia-smi.log" 2>&1 ||
  true

step cublas_loader 60 "$gtest_result" -- "$bin/cublas_loader_test"
step backend_tests 240 "$gtest_result" -- "$bin/cuda_backend_test" --gtest_output="json:$logs/cuda_backend_test.json"
# reckon for PyTorch with parameters on the GPU (cuda/cuda_flat_replica.h, issue
# 36): the replica against the host's bit for bit, peers on the GPU and the
# host in one cluster, then torch processes with CUDA tensors.
step flat_replica_tests 60 "$gtest_result" -- "$bin/cuda_flat_replica_test"
step flat_peer_gpu 90 "$gtest_result" -- "$bin/flat_peer_test" --gtest_filter='*Gpu*'
if [ -d "$unpacked/python/reckon" ]; then
  step torch_cuda 120 'grep -E "^(FIGURES|OK|FAILED|Ran )" "$log" | tr "\n" " "' \
    -- env PYTHONPATH="$unpacked/python" PYTHONUNBUFFERED=1 python3 -c "
import sys, unittest
sys.path.insert(0, '$unpacked/python/torch_tests')
import torch_peers_test as t
names = ['test_on_a_gpu_and_on_the_cpu_they_end_with_the_same_replica',
         'test_two_on_a_gpu_and_one_on_the_cpu_end_with_one_replica',
         'test_parameters_on_no_device_reckon_takes_are_refused_by_name']
r = unittest.TextTestRunner(verbosity=2).run(
    unittest.TestSuite(t.TorchPeers(n) for n in names))
sys.exit(0 if r.wasSuccessful() and not r.skipped else 1)"
else
  echo "| torch_cuda | - | - | not run: the pack has no Python module |" >> "$summary"
fi
step flat_memcheck 90 'grep -E "ERROR SUMMARY|\[  (PASSED|FAILED)" "$log" | tr "\n" " " | grep . || tail -2 "$log"' \
  -- compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_flat_replica_test"
step bench_gpu 150 'python3 -c "
import json,sys; j=json.load(open(sys.argv[1]))
parts=[]
for s in j[\"sizes\"]:
    m=s[\"methods\"]
    f=\"; \".join(\"fused %s %.2fx\" % (x[\"optimizer\"], x[\"speedup\"]) for x in s[\"fused\"])
    parts.append(\"%s params: pass vs memcpy %s; %s; 80 peers apply %.3f ms\" % (s[\"params\"], \", \".join(\"%s %.2fx\" % (k, v[\"vs_memcpy\"]) for k, v in m.items()), f, s[\"apply_80_peers_s\"]*1e3))
st=j[\"step\"]; t=j[\"step_tf32\"]
parts.append(\"Strom step b1024 fp32 %.3f ms (%.2fx sgemm), tf32 %.3f ms; pass+copy+Rice %.1f%%\" % (st[\"step_s\"]*1e3, st[\"ratio\"], t[\"step_s\"]*1e3, 100*st[\"fraction\"]))
print(\" | \".join(parts))" "$log.json" || tail -2 "$log"' \
  -- bash -c "$bin/reckonctl bench gpu --json > $logs/bench_gpu.log.json"
cp "$logs/bench_gpu.log.json" "$out/bench_gpu.json" 2> /dev/null
# What peer.step() adds to torch's step with the model on the GPU
# (docs/pytorch.md "What a step costs").
if [ -d "$unpacked/python/reckon" ]; then
  step torch_step_cost 120 'python3 -c "
import json,sys
for l in open(sys.argv[1]):
    if l.startswith(\"{\"):
        r=json.loads(l); print(\"%s %d params: torch %.3f ms, +peer %.3f ms (%.2fx);\" % (r[\"device\"], r[\"params\"], r[\"torch_step_ms\"], r[\"peer_ms\"], r[\"ratio\"]))" "$log"' \
    -- env PYTHONPATH="$unpacked/python" PYTHONUNBUFFERED=1 python3 \
       "$unpacked/python/torch_tests/torch_step_cost.py" --device cuda --params 1e6,1e7,1e8 --steps 50
  # The transformer LM of examples/torch/lm.py with AdamW, its forward pass
  # under torch.autocast (bf16), at 25M and 150M parameters (issue 58).
  step torch_lm_cost 120 'python3 -c "
import json,sys
for l in open(sys.argv[1]):
    if l.startswith(\"{\"):
        r=json.loads(l); print(\"%s %s %s %d params: torch %.3f ms, +peer %.3f ms (%.2fx);\" % (r[\"device\"], r[\"model\"], r[\"autocast\"], r[\"params\"], r[\"torch_step_ms\"], r[\"peer_ms\"], r[\"ratio\"]))" "$log"' \
    -- env PYTHONPATH="$unpacked/python" PYTHONUNBUFFERED=1 python3 \
       "$unpacked/python/torch_tests/torch_step_cost.py" --device cuda --model lm \
       --lm-shapes 512:8,1024:12 --batch 32 --context 256 --autocast bf16 --steps 30 --tau 0.0012
fi

train=(--data_dir "$pack/data" --progress=off --backend "$backend" "${short[@]}")
step train_alone 120 'json_field "$log.json" test_accuracy samples_per_s compression_ratio' \
  -- "$bin/reckon-worker" --standalone "${train[@]}" --epochs 1 --http-listen=127.0.0.1:0 \
     --summary-json="$logs/train_alone.log.json"
step train_alone_tf32 60 'json_field "$log.json" test_accuracy samples_per_s compression_ratio' \
  -- "$bin/reckon-worker" --standalone "${train[@]}" --epochs 1 --gemm-precision tf32 \
     --http-listen=127.0.0.1:0 --summary-json="$logs/train_alone_tf32.log.json"
step train_four_workers 150 'json_field "$log.json" test_accuracy hashes_equal samples_per_s compression_ratio' \
  -- "$bin/reckonctl" local --workers 4 --worker-binary "$bin/reckon-worker" --work-dir "$logs/four" \
     --summary-json "$logs/train_four_workers.log.json" --timeout-s 140 "${train[@]}" --epochs 1
step memcheck 150 'grep -E "ERROR SUMMARY|\[  (PASSED|FAILED)" "$log" | tr "\n" " " | grep . || tail -2 "$log"' \
  -- compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_backend_test" \
     --gtest_filter='-*FashionMnist*'
step racecheck 120 'grep -E "RACECHECK SUMMARY|ERROR SUMMARY|\[  (PASSED|FAILED)" "$log" | tr "\n" " " | grep . || tail -2 "$log"' \
  -- compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/cuda_backend_test" \
     --gtest_filter='*NanOrInf*:*FusedOptimizerPass*:*DeviceCodec*:*BiasGradient*'
step strom2015_alone 240 'json_field "$log.json" test_accuracy weight_hash samples_per_s compression_ratio train_seconds' \
  -- "$bin/reckon-worker" --standalone --recipe strom2015 "${train[@]}" --http-listen=127.0.0.1:0 \
     --summary-json="$logs/strom2015_alone.log.json"
step strom2015_alone_tf32 240 'json_field "$log.json" test_accuracy samples_per_s compression_ratio train_seconds' \
  -- "$bin/reckon-worker" --standalone --recipe strom2015 "${train[@]}" --gemm-precision tf32 \
     --http-listen=127.0.0.1:0 --summary-json="$logs/strom2015_alone_tf32.log.json"
step strom2015_four_workers 240 'json_field "$log.json" test_accuracy hashes_equal samples_per_s compression_ratio' \
  -- "$bin/reckonctl" local --workers 4 --worker-binary "$bin/reckon-worker" --work-dir "$logs/strom4" \
     --summary-json "$logs/strom2015_four_workers.log.json" --timeout-s 230 --recipe strom2015 \
     "${train[@]}"
# The same four shards trained by four workers alone at once (gossip off),
# sharing the GPU: issue 37's overlap target is the cluster's samples/s
# (gossip on, above) within 1.05x of these four's together.
step strom2015_four_alone 240 'python3 -c "
import json,sys
alone=[json.load(open(\"%s/alone4_%d.json\" % (sys.argv[1], i))) for i in range(4)]
total=sum(a[\"samples_per_s\"] for a in alone)
on=json.load(open(sys.argv[1]+\"/strom2015_four_workers.log.json\"))[\"samples_per_s\"]
print(\"gossip off: %.0f samples/s (four alone, %.2f-%.2f%%); gossip on %.0f: off/on %.3fx\" % (total, 100*min(a[\"test_accuracy\"] for a in alone), 100*max(a[\"test_accuracy\"] for a in alone), on, total/on))" "$(dirname "$log")" || tail -2 "$log"' \
  -- bash -c 'pids=(); for i in 0 1 2 3; do
       "$0" --standalone --recipe strom2015 "${@}" --shard $i/4 --http-listen=127.0.0.1:0 \
         --summary-json="'"$logs"'/alone4_$i.json" > "'"$logs"'/alone4_$i.log" 2>&1 & pids+=($!); done
     rc=0; for p in "${pids[@]}"; do wait $p || rc=1; done; exit $rc' "$bin/reckon-worker" "${train[@]}"

# The training thread on the GPU while its node absorbs 8 peers' Strom-size
# messages (issue 37's overlap: the step with gossip on against off).
step absorbing_gpu 120 'python3 -c "
import json,sys
r=[j for j in (json.loads(l) for l in open(sys.argv[1]) if l.startswith(\"{\")) if j.get(\"section\")==\"training\"][0]
print(\"%s: alone %.3f ms, absorbing %d origins %.3f ms (%.3fx), apply %.3f ms, publish %.3f ms a step\" % (r[\"backend\"], r[\"step_ms_alone\"], r[\"origins\"], r[\"step_ms_absorbing\"], r[\"step_ratio\"], r[\"apply_ms_per_step\"], r[\"publish_ms_per_step\"]))" "$log.json" || tail -2 "$log"' \
  -- bash -c "$bin/reckonctl bench inbound --paths gpu-host --messages 10 --train-steps 200 \
     --train-backend $backend --train-layers 784,1800,1800,1800,1800,1800,10 \
     --train-activation sigmoid --json > $logs/absorbing_gpu.log.json"
cp "$logs/absorbing_gpu.log.json" "$out/absorbing_gpu.json" 2> /dev/null

# The node's receive path on this host's cores (issue 33): 1, 2 and every
# core's receive threads at Strom's size; tests/bench/scaling_model.py
# --inbound-json reads its gpu-host rows (a worker's node, no mirror, the
# apply on the device; this VM has two cores: the fit to them is poor).
step bench_inbound 90 'python3 -c "
import json,sys
rows=[json.loads(l) for l in open(sys.argv[1]) if l.startswith(\"{\")]
print(\"; \".join(\"%s %s %d threads %.0f msg/s\" % (r[\"size\"], r[\"path\"], r[\"threads\"], r[\"messages_per_s\"]) for r in rows if r.get(\"size\")==\"strom\"))" "$log.json" || tail -2 "$log"' \
  -- bash -c "$bin/reckonctl bench inbound --messages 100 --train-steps 300 --json > $logs/bench_inbound.log.json"
cp "$logs/bench_inbound.log.json" "$out/bench_inbound.json" 2> /dev/null

# The codec alone on this host's (Intel) core against zstd-1 (issue 57 asks
# Rice's encode at 3x zstd-1's rate and its decode at 1.5x on Intel and AMD
# cores; this VM is the AMD one). Last: it needs no GPU.
step bench_codec 60 'python3 -c "
import json,sys
rows=[json.loads(l) for l in open(sys.argv[1]) if l.startswith(\"{\")]
print(\"; \".join(\"%g: encode %.2fx, decode %.2fx zstd-1\" % (r[\"density\"], r[\"rice_encode_updates_per_s\"]/r[\"zstd1_compress_updates_per_s\"], r[\"rice_decode_updates_per_s\"]/r[\"zstd1_decompress_updates_per_s\"]) for r in rows))" "$log.json" || tail -2 "$log"' \
  -- bash -c "$bin/reckonctl bench codec --json > $logs/bench_codec.log.json"
cp "$logs/bench_codec.log.json" "$out/bench_codec.json" 2> /dev/null

# The dense round trip's parts and the payload's CRC both ways on this
# host's cores (issue 57: the carry-less fold against the crc32
# instruction's three streams, measured on the AMD VM only). No GPU.
step bench_train_dense 30 'python3 -c "
import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if l.startswith(\"{\")][0]
print(\"round trip %.1f%% of a %.2f ms step; payload CRC %.3f ms (folded: %s), three streams %.3f ms\" % (100*r[\"round_trip_share\"], r[\"step_ms\"], r[\"crc32c_ms\"], r[\"crc32c_folded\"], r[\"crc32c_three_streams_ms\"]))" "$log.json" || tail -2 "$log"' \
  -- bash -c "$bin/reckonctl bench train --codec dense --json > $logs/bench_train_dense.log.json"
cp "$logs/bench_train_dense.log.json" "$out/bench_train_dense.json" 2> /dev/null

# A profile of Strom's step at batch 1,024 (issue 58: before any change aimed
# at the pass's share): Nsight Compute's duration of each kernel of a few
# steady steps (the launches after the first 400), where ncu can read the
# device (not under gVisor: /work/.library/device/KINDS.md). Last: the
# figures above do not wait for it.
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2> /dev/null | head -1)
if [ -n "$ncu_bin" ]; then
  step ncu_strom_step 90 'grep -c "Duration" "$log" | sed "s/$/ kernels profiled/"; grep -E "==(ERROR|WARNING)==" "$log" | head -2' \
    -- "$ncu_bin" --clock-control none --section SpeedOfLight --launch-skip 400 --launch-count 60 \
       "$bin/reckon-worker" --standalone --recipe strom2015 --batch 1024 --warmup-batch 0 \
       --pretrain-samples 0 "${train[@]}" --max-steps 40 --http-listen=127.0.0.1:0
else
  echo "| ncu_strom_step | - | - | not run: no ncu on this machine |" >> "$summary"
fi

echo "| total | $failed | $(( $(date +%s) - started )) | budget ${budget_s} s |" >> "$summary"
tar -czf "$out/logs.tar.gz" -C "$out" logs && rm -rf "$logs"
cat "$summary"
exit $failed
