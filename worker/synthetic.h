// The synthetic worker (reckon-worker --synthetic; docs/scaling.md): a
// member of the cluster like any worker (it joins, gossips, checks its
// replica against the messages, quiesces) that does not train. Each step it
// emits one Update of a configured number of random +-tau updates, at a
// configured rate, and applies everything its peers send to a replica of
// the model. It costs no forward or backward pass, so dozens fit on two
// cores: the gossip layer is measured at sizes the machine could not train.
//
// Its replicas must end identical like any cluster's: the random updates are
// real updates of the model's weights (threshold codec, the cluster's tau).
//
// Threads: RunSynthetic on the calling thread (as Trainer::Run);
// ArrivalLog's Hook on the node thread, its readers anywhere (its own
// lock). Errors: options that cannot be are kInvalidArgument naming the
// flag (CheckSyntheticOptions).
#ifndef RECKON_WORKER_SYNTHETIC_H_
#define RECKON_WORKER_SYNTHETIC_H_

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/json.h"
#include "proto/reckon.pb.h"
#include "server/version_vector.h"
#include "worker/summary.h"
#include "worker/trainer.h"

namespace reckon::worker {

struct SyntheticOptions {
  int64_t updates_per_message = 1000;  // +-tau updates in each message (<= params)
  double rate = 10;                    // messages per second; 0: as fast as it can
};

// Checks the options against the model: kInvalidArgument naming the flag.
absl::Status CheckSyntheticOptions(const SyntheticOptions& synthetic, uint64_t param_count);

// Each peer message's arrival here, by the Update's emitted_unix_ns (the
// origin's clock; on one machine, or NTP-synced ones, the time it took to
// arrive). Hook() is the node's on_accept: called on the node thread.
class ArrivalLog {
 public:
  static constexpr size_t kMaxArrivals = 4 << 20;  // past this, only counted
  std::function<void(const server::OriginKey&, const v1::Update&)> Hook();
  // {"origin node id": [[seq, microseconds], ...], ...}; messages without a
  // time (0) are left out.
  base::Json ToJson();
  uint64_t dropped();

 private:
  absl::Mutex mu_;
  std::map<std::string, std::vector<std::pair<uint64_t, int64_t>>> by_origin_ ABSL_GUARDED_BY(mu_);
  size_t size_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// Runs the synthetic member: `options` as for Trainer (peers required, the
// model's shape, fraction bits and threshold step, backend, seed, identity,
// max_steps, stop), until max_steps messages (0: until `stop`), then waits
// for the cluster to be quiescent. The summary has no accuracy (nothing is
// trained): steps, bytes, the replica's hash, the node's counters.
absl::StatusOr<TrainSummary> RunSynthetic(const TrainerOptions& options,
                                          const SyntheticOptions& synthetic, std::ostream& log);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_SYNTHETIC_H_
