// The training loop of one worker (docs/design.md "One worker, one step"), on any
// backend, alone or with peers (TrainingPeers, implemented by the gossip
// node in worker/gossip_peers.h).
#ifndef RECKON_WORKER_TRAINER_H_
#define RECKON_WORKER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "codec/update_message.h"
#include "proto/reckon.pb.h"
#include "worker/backend.h"
#include "worker/dataset.h"

namespace reckon::worker {

// The trainer's view of the cluster. Called from the training thread only.
class TrainingPeers {
 public:
  virtual ~TrainingPeers() = default;
  // Before every step (docs/design.md step 1): applies to `backend` what peers
  // sent since the last call; re-joins from a snapshot when told to; may
  // pause while a peer lags (--max-lag). An error stops training.
  virtual absl::Status BeforeStep(Backend& backend, uint64_t steps_done) = 0;
  // After a step's message was applied locally: hands it to the peers.
  // Never blocks on the network.
  virtual absl::Status Publish(const v1::Update& message,
                               const codec::DecodedUpdate& decoded) = 0;
  // After the last step: keeps applying until every live member has finished
  // and the cluster is quiescent (or `stop` is set, or the deadline passes).
  virtual absl::Status Finish(Backend& backend, uint64_t steps_done,
                              const std::atomic<bool>* stop) = 0;
  // Workers training now, this one included (>= 1): what the momentum
  // rule is matched to (MatchMomentumToCluster).
  virtual int TrainingMembers() = 0;
  // For the summary: {"origin": seq, ...} and counters.
  virtual std::string VersionVectorJson() = 0;
  virtual std::string CountersJson() = 0;
};

struct TrainerOptions {
  std::string data_dir = kDefaultDataDir;
  int shard = 0, shards = 1;
  uint64_t seed = 1;
  int epochs = 10;
  int batch = 100;
  int64_t max_steps = 0;        // stop after this many steps in all (0: no limit)
  int64_t eval_samples = 0;     // test samples per evaluation (0: the whole test set)
  std::string backend = "auto";
  BackendConfig backend_config;  // shape, optimizer, mode, step, fraction bits
  double threshold = 0;          // as given (tau is in the step); the controller's start
  // When > 0, a controller steers tau so that each step emits about this
  // fraction of the parameters (docs/design.md step 5): the wire budget is set
  // directly, and emission does not dry up as the learning rate decays.
  double target_density = 0;
  v1::Codec wire_codec = v1::CODEC_THRESHOLD_RICE;
  std::string node_id = "standalone";
  uint64_t incarnation = 1;
  TrainingPeers* peers = nullptr;           // null: standalone
  // With peers and the momentum optimizer: match the momentum rule to the
  // number of workers training (MatchMomentumToCluster), so the cluster
  // follows one worker's recipe; false keeps --momentum per worker.
  bool match_momentum_to_cluster = true;
  const std::atomic<bool>* stop = nullptr;  // set (SIGTERM): stop after the current step
  std::string checkpoint_path;  // saved after every epoch when set
  std::string resume_path;      // loaded before training when set
  bool progress_bar = false;    // live bar (the caller sets it when stdout is a terminal)
  // Test only: the backend corrupts one weight before this step (1-based;
  // 0: never). worker/fault_backend.h.
  uint64_t fault_corrupt_weight_at_step = 0;
};

struct TrainSummary {
  std::string backend;
  std::string model;
  uint64_t params = 0;
  std::string codec;  // "dense" or the threshold wire codec
  double threshold = 0, tau = 0;  // tau: at the end (the controller may move it)
  int64_t step_quanta = 0;
  double target_density = 0;
  int epochs = 0;
  int64_t steps = 0;
  uint64_t samples = 0;
  double train_seconds = 0;
  double samples_per_s = 0;
  double train_flops_per_s = 0;  // 6 x MACs x samples / s: forward + backward, nominal
  double train_loss = 0;         // mean over the last epoch
  double test_loss = 0;
  double test_accuracy = 0;
  uint64_t updates_sent = 0;
  uint64_t wire_bytes = 0;       // serialized Update messages (dense: fp32 per parameter)
  uint64_t dense_bytes = 0;      // what fp32 gradients would take: steps x params x 4
  double compression_ratio = 0;  // dense_bytes / wire_bytes
  double update_density = 0;     // updates / (steps x params)
  std::string weight_hash;
  // With peers: this origin, its version vector at the end, node counters.
  std::string node_id;
  uint64_t incarnation = 0;
  std::string version_vector = "{}";
  std::string node_counters = "{}";
  bool stopped_early = false;  // by a signal
  // With peers: whether the momentum rule followed the cluster's size, and
  // the most workers it was matched to.
  bool momentum_matched = false;
  int max_training_members = 1;
};

// Trains to the end (or max_steps), logging a line per epoch to `log`.
// Errors: data missing or malformed, a bad resume file or one from another
// configuration, a diverged residual (NaN): each says what is wrong.
absl::StatusOr<TrainSummary> RunTraining(const TrainerOptions& options, std::ostream& log);

// The summary as one JSON object (keys as in TrainSummary).
std::string SummaryJson(const TrainSummary& summary);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_TRAINER_H_
