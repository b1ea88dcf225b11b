// Reading the summary reckon-worker writes with --summary-json
// (worker/summary.h), and finding the reckon-worker binary to run.
//
// Threads: functions, any thread. Errors: a summary that cannot be read is
// its file's or parser's error, named; no reckon-worker is kUnavailable.
#ifndef RECKON_CTL_WORKER_SUMMARY_H_
#define RECKON_CTL_WORKER_SUMMARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/json.h"

namespace reckon::ctl {

// The fields `reckonctl local` and the benchmarks use, plus the whole object.
struct WorkerSummary {
  base::Json json;
  std::string weight_hash;
  double steps = 0, samples = 0, train_seconds = 0, samples_per_s = 0;
  double test_accuracy = 0, wire_bytes = 0, dense_bytes = 0, compression_ratio = 0;
};

// Workers that trained at once, as one rate: every worker's samples over
// the slowest one's training time (0 when none trained). `reckonctl local`
// counts the cluster and --alone's workers so, to compare them.
double SamplesPerSecondTogether(const std::vector<WorkerSummary>& workers);

// Parses the summary at `path`; an error names the file and, for a field
// missing or of another type, the field.
absl::StatusOr<WorkerSummary> ReadWorkerSummary(const std::string& path);

// Trains one dense worker alone (--standalone --codec dense) with
// `training_flags` (--fault-* dropped), logging to work_dir/baseline.{log,err},
// and reads its summary: the baseline of `reckonctl local --baseline` and
// `reckonctl compare`. kUnavailable, with the worker's stderr, when it fails.
absl::StatusOr<WorkerSummary> RunDenseBaseline(const std::string& worker_binary,
                                               const std::string& work_dir,
                                               const std::vector<std::string>& training_flags,
                                               int64_t timeout_s);

// Trains `workers` workers alone at once, each on its shard (--standalone
// --shard i/workers --threads `threads`) with `training_flags` (--fault-*
// dropped), logging to work_dir/alone-wI.{log,err}: what `reckonctl local
// --alone` compares the cluster with (the same work on the same cores,
// gossip off). Their summaries in shard order; kUnavailable naming the
// first that failed, with its stderr.
absl::StatusOr<std::vector<WorkerSummary>> RunShardsAlone(
    const std::string& worker_binary, const std::string& work_dir,
    const std::vector<std::string>& training_flags, int workers, int threads, int64_t timeout_s);

// The reckon-worker binary built or installed beside the running reckonctl
// (or test); empty when there is none.
std::string FindWorkerBinary();

}  // namespace reckon::ctl

#endif  // RECKON_CTL_WORKER_SUMMARY_H_
