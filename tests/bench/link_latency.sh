#!/bin/bash
# Four workers of the default recipe behind `reckonctl lab` links with
# latency, two builds of reckon-worker alternating, ROUNDS rounds: how the
# momentum rule holds on a slow link (docs/benchmarks.md "Momentum over a link
# with latency"). Root (the lab makes network namespaces).
#
# usage: tests/bench/link_latency.sh OUT ROUNDS "LINK;LINK;..." OLD NEW [flags]
#   OUT     a JSONL file, appended: one line a run, the cluster's summary
#           (accuracy, samples/s) with the four workers' training losses and
#           the round trips the rule was matched to, and `build`, `link`,
#           `round`, `flags` fields
#   LINK    `loopback`, or a lab shape such as rate=1gbit,delay=25ms
#   OLD NEW two reckon-worker binaries (their `reckon-worker --version` goes
#           in each line's `build`)
#   flags   passed to every run, e.g. --epochs 1
# The figures file of 2026-12-04 was made with
#   tests/bench/link_latency.sh F 3 "rate=1gbit,delay=10ms;rate=1gbit,delay=25ms" OLD NEW --epochs 1
set -u
out=$1 rounds=$2 links=$3 old=$4 new=$5
shift 5
reckonctl=${RECKONCTL:-$(dirname "$0")/../../build/ctl/reckonctl}
IFS=';' read -ra shapes <<< "$links"
work=$(mktemp -d "${TMPDIR:-/tmp}/reckon-link-latency.XXXXXX")
trap 'rm -rf "$work"' EXIT
for round in $(seq 1 "$rounds"); do
  for link in "${shapes[@]}"; do
    for binary in "$old" "$new"; do
      rm -rf "$work/run"
      link_flags=()
      [ "$link" != loopback ] && link_flags=(--link "$link")
      timeout 900 "$reckonctl" local --workers 4 --work-dir "$work/run" --progress=off \
        --worker-binary "$binary" "${link_flags[@]}" --summary-json "$work/run/cluster.json" "$@" \
        > "$work/local.log" 2>&1
      python3 - "$out" "$("$binary" --version 2>&1 | head -1)" "$link" "$round" "$*" "$work/run" << 'PY'
import glob, json, sys
out, build, link, round_, flags, run = sys.argv[1:7]
try:
    cluster = json.load(open(f"{run}/cluster.json"))
except (OSError, ValueError):
    cluster = {}  # the run failed: the line says so with no accuracy
workers = [json.load(open(f)) for f in sorted(glob.glob(f"{run}/w*.json"))]
row = {"build": build, "link": link, "round": int(round_), "flags": flags,
       "test_accuracy": cluster.get("test_accuracy"), "samples_per_s": cluster.get("samples_per_s"),
       "train_loss": " ".join("%.2f" % w["train_loss"] for w in workers if "train_loss" in w),
       "max_peer_round_trip_steps": " ".join(str(w["max_peer_round_trip_steps"]) for w in workers
                                             if "max_peer_round_trip_steps" in w) or "-",
       "wire_bytes": sum(w.get("wire_bytes", 0) for w in workers),
       "hashes_equal": len({w.get("weight_hash") for w in workers}) == 1}
with open(out, "a") as f:
    f.write(json.dumps(row) + "\n")
print(build[:40], link, round_, row["test_accuracy"], row["train_loss"], row["max_peer_round_trip_steps"])
PY
    done
  done
done
