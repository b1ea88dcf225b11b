// The training loop of one worker (docs/design.md "One worker, one step"), on any
// backend, alone or with peers (TrainingPeers, implemented by the gossip
// node in worker/gossip_peers.h). Its parts: the data (training_data.h),
// how epochs are cut into steps (epoch_plan.h), the automatic batch size
// (batch_size_search.h), the own update's one path (publisher.h).
//
// Threads: one thread makes a Trainer and calls every method (the
// training thread); TrainingPeers is called on it too. Errors: Create's
// name the data, shard, checkpoint or backend that cannot be used; Run's
// end the run (a diverged residual, a device error, the peers' kInternal
// on a failed replica check); a stop flag set is not an error (the summary
// says stopped_early).
#ifndef RECKON_WORKER_TRAINER_H_
#define RECKON_WORKER_TRAINER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/json.h"
#include "codec/update_message.h"
#include "model/backend.h"
#include "proto/reckon.pb.h"
#include "worker/batch_size_search.h"
#include "worker/checkpoint.h"
#include "worker/dataset.h"
#include "worker/density_controller.h"
#include "worker/epoch_plan.h"
#include "worker/metrics.h"
#include "worker/npy_dataset.h"
#include "worker/publisher.h"
#include "worker/samples.h"
#include "worker/summary.h"
#include "worker/training_data.h"

namespace reckon::worker {

// The trainer's view of the cluster. Called from the training thread only.
class TrainingPeers {
 public:
  virtual ~TrainingPeers() = default;
  // Before every step (docs/design.md step 1): applies to `replica` what peers
  // sent since the last call; re-joins from a snapshot when told to; may
  // pause while a peer lags (--max-lag). An error stops training.
  virtual absl::Status BeforeStep(model::Replica& replica, uint64_t steps_done) = 0;
  // After a step's message was applied locally (worker/publisher.h): hands
  // it to the peers, taking it. Never blocks on the network.
  virtual absl::Status Publish(v1::Update message, const codec::DecodedUpdate& decoded) = 0;
  // After the last step: keeps applying until every live member has finished
  // and the cluster is quiescent (or `stop` is set, or the deadline passes).
  virtual absl::Status Finish(model::Replica& replica, uint64_t steps_done,
                              const std::atomic<bool>* stop) = 0;
  // After Finish (--after-training serve): keeps applying what peers send
  // until `stop` is set, so that a member joining later (restarted), or one
  // that was cut off and trained on, can train and quiesce with this one (a
  // node nobody drains is never settled). Each time the cluster agrees
  // again at another version vector, `on_agreement` runs (on this thread,
  // `replica` holding what they agreed on); its error ends Serve.
  virtual absl::Status Serve(model::Replica& replica, const std::atomic<bool>& stop,
                             const std::function<absl::Status()>& on_agreement) = 0;
  // The trainer read its data: what its model takes of raw features, for
  // the peers to serve with the weights (reckonctl export --peer).
  virtual void DescribeInput(const InputTransform& /*input*/) {}
  // Workers training now, this one included (>= 1): what the momentum
  // rule is matched to (MatchMomentumToCluster).
  virtual int TrainingMembers() = 0;
  // The round trip to the peers in this worker's own steps
  // (server::TrainingPort::PeerRoundTripSteps): what the link adds to the
  // momentum rule's staleness. Negative while nothing is measured yet.
  virtual double PeerRoundTripSteps() { return 0; }
  // Whether this replica holds any message (applied, or in the snapshot it
  // joined from): false only in a cluster that has not started training.
  virtual bool HoldsMessages() = 0;
  // The messages this worker's earlier lives (its node id, older
  // incarnations) published that this replica holds: where a restarted
  // worker's shard continues.
  virtual uint64_t PublishedByEarlierLives() = 0;
  // For the summary: the version vector {"origin": seq, ...} and the node's
  // counters {"name": count, ...}.
  virtual base::Json VersionVector() = 0;
  virtual base::Json Counters() = 0;
};

struct TrainerOptions {
  std::string data_dir = kDefaultDataDir;
  // A NumPy dataset read whole into memory at the start (--data-in-memory);
  // false: mapped, read as the epochs ask for its rows (samples.h), so a
  // dataset larger than memory trains. IDX files are always read whole.
  bool data_in_memory = false;
  int shard = 0, shards = 1;
  uint64_t seed = 1;
  int epochs = 10;
  // The minibatch size, and the one the learning rate is given for: a step
  // of b samples uses lr x (b / batch)^auto_batch_lr_power.
  int batch = 100;
  // The first-epoch ramp (Strom 2015 section 3.3 and Table 1): the first
  // `warmup_fraction` of the first epoch's samples go in minibatches of
  // `warmup_batch` (0: no ramp), at the learning rate of a step of that
  // size (see `batch`), the rest of the epoch at `batch`. Strom: "without
  // this, the training diverges in the first epoch".
  int warmup_batch = 0;
  double warmup_fraction = 1.0 / 6;
  // With peers, Strom's fewer workers at the start (Table 1: 10 nodes for
  // the first sixth of the first epoch, then more): only the workers of
  // shards 0 .. start_workers - 1 train the warm-up (warmup_fraction of the
  // first epoch); the others join once the cluster has (WarmupMessages)
  // and train their first epoch without the ramp. 0: all start together.
  int start_workers = 0;
  // Supervised layer-wise pre-training (worker/pretrain.h) on this many
  // samples of the shard before the first step (0: none), in minibatches of
  // warmup_batch (batch without a ramp). Alone: on a fresh start (not a
  // resume). With peers: only on the worker of shard 0, and only when the
  // cluster has applied nothing yet; it publishes the result as one dense
  // Update, and the other workers join from a snapshot that holds it
  // (PeerOptions::join_after_messages).
  int64_t pretrain_samples = 0;
  // Automatic minibatch-size selection (Seide 2014 section 4; docs/training.md):
  // when not empty, the candidate sizes, ascending. At the start of every
  // `auto_batch_every`-th epoch the worker trains a copy of its model on the
  // next `auto_batch_samples` samples once per candidate (locally: nothing
  // is sent), measures each copy's accuracy on `auto_batch_eval` fixed
  // training samples, and trains the epoch with the largest candidate whose
  // accuracy is within `auto_batch_tolerance` (a fraction) of the best.
  std::vector<int> auto_batch;
  int auto_batch_every = 1;
  int64_t auto_batch_samples = 2000;
  int64_t auto_batch_eval = 2000;
  double auto_batch_tolerance = 0.005;
  // How the rate follows the size: 1 keeps the rate per sample (Seide 2014
  // eq. 1 sums the gradient over the minibatch; reckon's is the mean), 0.5
  // scales it with the square root, 0 keeps the rate per step (the default:
  // the only one of the three that did not lose accuracy, docs/training.md).
  double auto_batch_lr_power = 0;
  int64_t max_steps = 0;     // stop after this many steps in all (0: no limit)
  int64_t eval_samples = 0;  // test samples per evaluation (0: the whole test set)
  std::string backend = "auto";
  model::BackendConfig backend_config;  // shape, optimizer, mode, step, fraction bits
  double threshold = 0;                 // as given (tau is in the step); the controller's start
  // When > 0, a controller steers tau so that each step emits about this
  // fraction of the parameters (docs/design.md step 5): the wire budget is set
  // directly, and emission does not dry up as the learning rate decays.
  double target_density = 0;
  // The Update codec: THRESHOLD_RICE or _PACKED32 in threshold mode, else the
  // quanta codec (backend_config.codec.codec). Peers must all use the same.
  v1::Codec wire_codec = v1::CODEC_THRESHOLD_RICE;
  std::string node_id = "standalone";
  uint64_t incarnation = 1;
  TrainingPeers* peers = nullptr;  // null: standalone
  // With peers and the momentum optimizer: match the momentum rule to the
  // number of workers training (MatchMomentumToCluster), so the cluster
  // follows one worker's recipe; false keeps --momentum per worker.
  bool match_momentum_to_cluster = true;
  const std::atomic<bool>* stop = nullptr;  // set (SIGTERM): stop after the current step
  std::string checkpoint_path;              // saved after every epoch when set
  std::string resume_path;                  // loaded before training when set
  bool progress_bar = false;         // live bar (the caller sets it when stdout is a terminal)
  WorkerMetrics* metrics = nullptr;  // Prometheus metrics of the loop (null: none)
  // Test only: the backend corrupts one weight before this step (1-based;
  // 0: never). worker/fault_backend.h.
  uint64_t fault_corrupt_weight_at_step = 0;
  // Test only: no training step starts sooner than this after the one
  // before (0: no floor). worker/fault_backend.h.
  int32_t fault_slow_step_ms = 0;
  // Test only: wraps every backend the run makes: its own, each auto-batch
  // trial's and each pre-training stage's (a test stands in a device that
  // fails, or stops the run at a chosen step).
  std::function<std::unique_ptr<model::Backend>(std::unique_ptr<model::Backend>)> wrap_backend;
};

// One run of the training loop, in the steps of docs/design.md "One worker,
// one step". Not thread-safe: one thread creates it and runs it.
class Trainer {
 public:
  // Loads and standardizes the data, takes this worker's shard, makes the
  // backend and the initial replica: from the seed, or where the checkpoint
  // at options.resume_path left off. Errors name what is wrong: data missing
  // or malformed, a shard smaller than a batch, a bad resume file or one from
  // another configuration.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainerOptions& options,
                                                         std::ostream& log);
  // Trains to the last epoch (or max_steps, or the stop flag), logging a line
  // per epoch and saving a checkpoint after each when asked; with peers, then
  // waits until the cluster is quiescent. A diverged residual (NaN) or a
  // peer-side failure ends it with an error. Call once.
  absl::StatusOr<TrainSummary> Run();
  // After Run, until the stop flag is set: with peers, stays a live member
  // that applies what they send (TrainingPeers::Serve); alone, waits. When
  // the cluster agrees again at another version vector (a member cut off by
  // a partition, or restarted, added steps after the first agreement), the
  // summary is brought to the new final replica (evaluated again, its hash
  // and vector, `agreements` counted) and handed to `report`, which rewrites
  // the summary file.
  absl::Status Serve(const std::function<absl::Status(const TrainSummary&)>& report);

 private:
  // Serve's callback: the cluster agreed again at another vector.
  absl::Status ReportNewAgreement(const std::function<absl::Status(const TrainSummary&)>& report);
  using Clock = std::chrono::steady_clock;
  // What one epoch did, for its log line and the summary.
  struct EpochTally {
    double loss_sum = 0;
    uint64_t samples = 0, steps = 0, updates = 0, wire_bytes = 0;
    Clock::time_point start = Clock::now(), last_bar = start;
    // Where the epoch ended: its position in the epoch's order (the next
    // step's first sample), and whether every batch that fits was trained
    // (false: stopped inside it).
    size_t position = 0;
    bool complete = false;
  };

  Trainer(const TrainerOptions& options, std::ostream& log);
  absl::Status MakeReplica();
  absl::Status Resume();
  CheckpointIdentity Identity() const;

  // --pretrain-samples: pre-trains when this worker is the one to (see
  // TrainerOptions::pretrain_samples), then starts from the result.
  absl::Status MaybePretrain();
  // The pre-trained replica as one dense fp32 Update from this replica (the
  // seed's): applied here and, with peers, published.
  absl::Status StartFrom(std::span<const int64_t> pretrained);
  // Trains epoch `epoch` from its start, or from where a resumed run
  // stopped inside it, until its end or a stop.
  absl::StatusOr<EpochTally> RunEpoch(int epoch);
  // The size of the batch at `position` of epoch `epoch`'s order (the
  // warm-up ramp's or batch_), or 0 when no whole batch is left there.
  int BatchAt(int epoch, size_t position) const;
  // With peers, in a restarted worker: continues the shard after the steps
  // its earlier lives published (TrainingPeers::PublishedByEarlierLives).
  void ContinueShard();
  // Whether to stop before the next step (max_steps, or the stop flag).
  bool StopBeforeStep();
  // One step on order_[first, first + batch).
  absl::Status Step(int epoch, size_t first, int batch, EpochTally& tally);
  void RematchMomentum();
  // The learning rate for a step of `batch` samples (see TrainerOptions::batch).
  float StepLearningRate(int epoch, int batch) const;
  // What a step of `batch` samples multiplies the rate by.
  double BatchSizeFactor(int batch) const;
  // The step's batch through the backend in halves: staged (unless the
  // step before staged it), launched, the next one staged, finished.
  absl::StatusOr<model::BatchStats> TrainOn(int epoch, size_t first, int batch);
  // While a step computes: fills and stages (Backend::StageBatch) the batch
  // at `position` of this epoch, if there is one, so the next step finds it
  // on the device.
  void StageAhead(int epoch, size_t position);
  // Automatic minibatch-size selection (TrainerOptions::auto_batch): sets
  // batch_ for this epoch (BatchSizeSearch).
  absl::Status SelectBatch(int epoch);
  // The step's emission through the publisher (encoded, self-checked,
  // applied to the replica, handed to the peers), into `tally`.
  absl::Status ApplyAndPublishQuanta(EpochTally& tally);
  absl::Status ApplyAndPublish(EpochTally& tally);
  void DrawProgressBar(int epoch, EpochTally& tally);
  absl::Status EndEpoch(int epoch, const EpochTally& tally);
  // The checkpoint at the run's position: after `tally` of epoch `epoch`.
  absl::Status SaveCheckpointAt(int epoch, const EpochTally& tally);
  absl::Status FinishWithPeers();
  // The test set's loss and accuracy into the summary; a backend that
  // cannot evaluate (a device error) ends the run with its error.
  absl::Status Evaluate();
  absl::StatusOr<TrainSummary> Summarize();

  const TrainerOptions options_;
  std::ostream& log_;
  model::BackendConfig config_;  // options.backend_config, sized for the batch
  // The splits, the shard, the epoch's order and the batch buffers.
  std::unique_ptr<TrainingData> data_;
  int batch_ = 0;  // in force (auto batch moves it)
  std::unique_ptr<BatchSizeSearch> batch_search_;  // with --auto-batch
  std::optional<EpochPlan> plan_;                  // of the shard, made in Create
  std::unique_ptr<model::Backend> backend_;

  codec::ThresholdStep step_now_;  // tau in force (the controller moves it)
  std::optional<DensityController> controller_;
  int first_epoch_ = 0;
  // Resumed inside epoch first_epoch_: the samples of its order already
  // trained (its selection of the batch size, if any, already made).
  size_t resume_position_ = 0;
  // The replica holds the pre-trained start (done here, or before a resume).
  bool holds_pretrained_ = false;
  int64_t steps_done_ = 0;
  bool stopped_ = false;

  // The batch staged in the backend for the next step: order_[first, first
  // + batch) of `epoch` (epoch -1: none). Staged only within an epoch, so a
  // new order never meets an old batch.
  struct StagedBatch {
    int epoch = -1;
    size_t first = 0;
    int batch = 0;
    bool operator==(const StagedBatch&) const = default;
  };
  StagedBatch staged_;
  model::Emission emission_;  // the step's, reused
  // Numbers, encodes, applies and sends the emissions (made in Init).
  std::optional<Publisher> publisher_;

  // The momentum rule in force (MatchMomentumToCluster), re-matched when the
  // number of workers training changes (a join, a death, one finishing) or
  // the round trip to the peers moves by half a step (it is matched to the
  // round trip rounded to half steps); logged when the members change or the
  // round trip moved a step from the one last logged. Until a round trip is
  // measured, the steps since this worker's first with peers stand for it
  // (no answer yet: the round trip is at least that long).
  bool match_momentum_ = false;
  int matched_members_ = 1;
  double matched_round_trip_ = 0;
  double logged_round_trip_ = 0;
  std::optional<uint64_t> first_step_with_peers_;
  double lr_scale_ = 1;
  double momentum_now_ = 0;  // the backend's momentum coefficient

  TrainSummary summary_;
  // The epoch and tally the checkpoint was last written at (--checkpoint):
  // written again with the cluster's replica whenever it agrees.
  std::optional<std::pair<int, EpochTally>> checkpointed_;
};

// Trainer::Create, then Run.
absl::StatusOr<TrainSummary> RunTraining(const TrainerOptions& options, std::ostream& log);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_TRAINER_H_
