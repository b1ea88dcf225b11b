// Trainer's checkpoints (worker/checkpoint.h): what a run saves after each
// epoch, and how a run started with --resume goes on from one.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/codec.h"
#include "worker/trainer.h"

namespace reckon::worker {
namespace {

// The checkpoint's mode: threshold, or the quanta codec's flag name.
std::string ModeName(const model::BackendConfig& config) {
  return config.mode == model::UpdateMode::kThreshold ? "threshold"
                                                      : codec::CodecFlagName(config.codec.codec);
}

}  // namespace

CheckpointIdentity Trainer::Identity() const {
  CheckpointIdentity id;
  id.model = config_.shape.ToString();
  id.input = data_->input();
  id.fraction_bits = config_.fraction_bits;
  id.seed = options_.seed;
  id.optimizer = model::OptimizerName(config_.optimizer.kind);
  id.mode = ModeName(config_);
  id.target_density = options_.target_density;
  if (config_.mode == model::UpdateMode::kThreshold && options_.target_density == 0) {
    id.fixed_step_quanta = config_.step.step_quanta;
  }
  return id;
}

absl::Status Trainer::Resume() {
  const std::string& path = options_.resume_path;
  RECKON_ASSIGN_OR_RETURN(const TrainingState state,
                          LoadTrainingState(path, Identity(), config_.shape.param_count()));
  RECKON_RETURN_IF_ERROR(backend_->LoadWeights(state.weights));
  RECKON_RETURN_IF_ERROR(backend_->LoadTrainingState(state.residual, state.optimizer_state));
  if (absl::Status s = backend_->LoadCodecState(state.codec); !s.ok()) {
    return absl::DataLossError(absl::StrCat("--resume ", path, ": ", s.message()));
  }
  RECKON_ASSIGN_OR_RETURN(const std::string resumed_hash, backend_->WeightHash());
  if (resumed_hash != state.weight_hash) {
    return absl::DataLossError(
        absl::StrCat("--resume ", path, ": weights do not match their recorded hash"));
  }
  if (config_.mode == model::UpdateMode::kThreshold && state.step_quanta != step_now_.step_quanta) {
    absl::StatusOr<codec::ThresholdStep> resumed = codec::MakeThresholdStep(
        std::ldexp(double(state.step_quanta), -config_.fraction_bits), config_.fraction_bits);
    if (!resumed.ok() || resumed->step_quanta != state.step_quanta) {
      return absl::DataLossError(absl::StrCat("--resume ", path, ": step of ", state.step_quanta,
                                              " quanta is not a valid threshold step"));
    }
    step_now_ = *resumed;
    backend_->SetThresholdStep(step_now_);
  }
  if (controller_) controller_->set_average(state.density_average);
  first_epoch_ = state.epochs_done;
  summary_.epochs = state.epochs_done;
  steps_done_ = state.steps_done;
  holds_pretrained_ = state.pretrained;
  if (state.samples_into_epoch < 0 || size_t(state.samples_into_epoch) > data_->shard_size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--resume ", path, ": it stopped at sample ", state.samples_into_epoch,
                     " of epoch ", state.epochs_done + 1, " but shard ", options_.shard, "/",
                     options_.shards, " has ", data_->shard_size(), " samples"));
  }
  resume_position_ = static_cast<size_t>(state.samples_into_epoch);
  // Auto batch continues with the size in force (until the next selection);
  // a fixed --batch is the flag's, so that a resume may change it.
  if (!options_.auto_batch.empty() && state.batch > 0) {
    if (std::find(options_.auto_batch.begin(), options_.auto_batch.end(), state.batch) ==
        options_.auto_batch.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--resume ", path, ": its batch of ", state.batch, " is not an --auto-batch candidate"));
    }
    batch_ = state.batch;
  }
  summary_.updates_sent = state.updates_sent;
  summary_.wire_bytes = state.wire_bytes;
  summary_.samples = state.samples_done;
  summary_.train_seconds = state.train_seconds;
  log_ << "reckon-worker: resumed from " << path << " at epoch " << first_epoch_ + 1 << ", sample "
       << resume_position_ << " of " << data_->shard_size() << ", step " << steps_done_ << "\n";
  return absl::OkStatus();
}

absl::Status Trainer::SaveCheckpointAt(int epoch, const EpochTally& tally) {
  TrainingState state;
  state.identity = Identity();
  state.step_quanta = config_.mode == model::UpdateMode::kThreshold ? step_now_.step_quanta : 0;
  state.density_average = controller_ ? controller_->average() : 0;
  // Stopped inside the epoch (a signal, or max_steps): a resume continues
  // at the next sample of its order.
  state.epochs_done = tally.complete ? epoch + 1 : epoch;
  state.samples_into_epoch = tally.complete ? 0 : static_cast<int64_t>(tally.position);
  state.steps_done = steps_done_;
  state.pretrained = holds_pretrained_;
  state.batch = batch_;
  RECKON_ASSIGN_OR_RETURN(state.weights, backend_->ReadWeights());
  RECKON_ASSIGN_OR_RETURN(state.residual, backend_->ReadResidual());
  RECKON_ASSIGN_OR_RETURN(state.optimizer_state, backend_->ReadOptimizerState());
  RECKON_ASSIGN_OR_RETURN(state.codec, backend_->ReadCodecState());
  state.updates_sent = summary_.updates_sent;
  state.wire_bytes = summary_.wire_bytes;
  state.samples_done = summary_.samples;
  state.train_seconds = summary_.train_seconds;
  RECKON_ASSIGN_OR_RETURN(state.weight_hash, backend_->WeightHash());
  RECKON_RETURN_IF_ERROR(SaveTrainingState(options_.checkpoint_path, state));
  if (!tally.complete) {
    log_ << "reckon-worker: checkpoint " << options_.checkpoint_path << " holds epoch " << epoch + 1
         << " at sample " << tally.position << " (step " << steps_done_
         << "): --resume continues there\n";
  }
  return absl::OkStatus();
}

// Every replica ends with every update: wait for the cluster, then evaluate
// the final replica (identical on every worker).

}  // namespace reckon::worker
