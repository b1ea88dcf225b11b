"""The quanta codec's round trip as a share of a worker's training samples
(issue 57 item 2), from a `perf record --call-graph dwarf` of a standalone
worker. Each sample is put in one class by its stack:

  setup        the trainer's creation (model, replica, dataset load)
  evaluate     the end of an epoch's test pass
  round trip   the encode and its feedback (in a pass of its own, or
               inside the optimizer's: DenseFeedbackPass), the publisher's self-check, the
               replica's apply: any frame of the codec's passes (those the
               issue names: quantize, encode, decode, apply)
  pool waiting the thread pool's own loop at the top of the stack (a
               thread that waits for work or for the other's chunk)
  training     everything else (the forward and backward GEMMs, the
               optimizer, the batch's gather)

and the round trip's share is taken of the training samples (all but setup
and evaluate), with and without the pool's waiting. A pool's wait inside a
round-trip pass (the caller's join) counts as the round trip.

    perf record --call-graph dwarf,16384 -o P reckon-worker --standalone \\
        --codec dense --epochs 1
    /usr/bin/python3 tests/bench/round_trip_share.py P [--json] [--leaves N]

Figures: docs/benchmarks.md "The round trip under a tenth of the step"."""
import argparse
import collections
import json
import subprocess

ROUND_TRIP = ("EncodeWithFeedback", "DenseFeedbackPass", "CheckQuantaUpdate",
              "CheckAndApplyDenseUpdate", "ApplyCheckedDense", "CheckDenseFp32Payload",
              "FixedPointReplica::ApplyDense", "DenseFp32::Encode", "PublishQuanta",
              "EncodeDense", "SubtractDense", "DenseValid", "DensePayloadsEqual",
              "AddDenseWrapping", "AddWrapping", "QuantaToFloats")
SETUP = ("Trainer::Create", "dl_main", "LoadIdx", "_dl_")
EVALUATE = ("Trainer::EndEpoch", "Evaluate")
POOL = ("HelperLoop", "ParallelFor", "sched", "yield")


def classify(frames):
    text = "\n".join(frames)
    if any(m in text for m in SETUP):
        return "setup"
    if any(m in text for m in EVALUATE):
        return "evaluate"
    if any(m in text for m in ROUND_TRIP):
        return "round trip"
    if frames and any(m in frames[0] for m in POOL):
        return "pool waiting"
    return "training"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("perf_data")
    p.add_argument("--json", action="store_true", help="one JSON line of the counts and shares")
    p.add_argument("--leaves", type=int, default=8, help="the round trip's top leaf functions")
    args = p.parse_args()
    try:
        script = subprocess.run(["perf", "script", "-i", args.perf_data, "-F", "comm,tid,ip,sym"],
                                capture_output=True, text=True, check=True).stdout
    except FileNotFoundError:
        raise SystemExit("round_trip_share.py: perf is not installed (apt-get install linux-perf)")
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"round_trip_share.py: perf script could not read {args.perf_data}: "
                         f"{e.stderr.strip()[-300:]}")
    counts = collections.Counter()
    leaves = collections.Counter()
    for sample in script.split("\n\n"):
        lines = [line.strip() for line in sample.strip().split("\n") if line.strip()]
        if len(lines) < 2:
            continue
        frames = [f.split(None, 1)[1] if len(f.split(None, 1)) > 1 else f for f in lines[1:]]
        kind = classify(frames)
        counts[kind] += 1
        if kind == "round trip":
            leaves[frames[0]] += 1
    training = sum(counts.values()) - counts["setup"] - counts["evaluate"]
    if training == 0:
        raise SystemExit("no training samples in " + args.perf_data)
    share = counts["round trip"] / training
    share_busy = counts["round trip"] / max(1, training - counts["pool waiting"])
    if args.json:
        print(json.dumps({"samples": dict(counts), "training_samples": training,
                          "round_trip_share": share, "round_trip_share_without_waiting": share_busy,
                          "leaves": dict(leaves.most_common(args.leaves))}))
        return
    for kind, n in counts.most_common():
        print(f"{kind:14s} {n:7d}")
    print(f"the round trip: {100 * share:.1f}% of the training samples "
          f"({100 * share_busy:.1f}% of those not waiting in the pool; target <= 10%)")
    for leaf, n in leaves.most_common(args.leaves):
        print(f"  {n:6d}  {leaf[:100]}")


if __name__ == "__main__":
    main()
