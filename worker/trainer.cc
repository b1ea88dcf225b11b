#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "codec/codec.h"
#include "codec/update_message.h"
#include "worker/backend_factory.h"
#include "worker/fault_backend.h"
#include "worker/pretrain.h"

namespace reckon::worker {
namespace {

// The steps a summary's version vector ({"origin": seq}) holds.
uint64_t TotalSteps(const base::Json& vector) {
  uint64_t total = 0;
  for (const auto& [origin, seq] : vector.items()) total += seq.get<uint64_t>();
  return total;
}

// The checkpoint's mode: threshold, or the quanta codec's flag name.
std::string ModeName(const model::BackendConfig& config) {
  return config.mode == model::UpdateMode::kThreshold ? "threshold"
                                                      : codec::CodecFlagName(config.codec.codec);
}

std::string HumanBytes(double b) {
  if (b >= 1e9) return absl::StrFormat("%.2f GB", b / 1e9);
  if (b >= 1e6) return absl::StrFormat("%.2f MB", b / 1e6);
  if (b >= 1e3) return absl::StrFormat("%.1f kB", b / 1e3);
  return absl::StrFormat("%.0f B", b);
}

std::string CodecName(model::UpdateMode mode, v1::Codec wire_codec) {
  if (mode == model::UpdateMode::kCodec) return codec::CodecFlagName(wire_codec);
  return wire_codec == v1::CODEC_THRESHOLD_RICE ? "threshold-rice" : "threshold-packed32";
}

}  // namespace

absl::Status CheckAutoBatchOptions(const TrainerOptions& options) {
  const std::vector<int>& sizes = options.auto_batch;
  if (sizes.empty()) return absl::OkStatus();
  if (sizes.front() < 1 || !std::is_sorted(sizes.begin(), sizes.end()) ||
      std::adjacent_find(sizes.begin(), sizes.end()) != sizes.end()) {
    return absl::InvalidArgumentError(
        "--auto-batch: the candidate sizes must be >= 1 and strictly ascending");
  }
  if (options.auto_batch_every < 1) {
    return absl::InvalidArgumentError("--auto-batch-every must be >= 1");
  }
  if (options.auto_batch_eval < 1) {
    return absl::InvalidArgumentError("--auto-batch-eval must be >= 1");
  }
  if (!(options.auto_batch_tolerance >= 0)) {
    return absl::InvalidArgumentError("--auto-batch-tolerance must be >= 0");
  }
  if (!(options.auto_batch_lr_power >= 0 && options.auto_batch_lr_power <= 1)) {
    return absl::InvalidArgumentError("--auto-batch-lr-power must be in [0, 1]");
  }
  if (options.auto_batch_samples < sizes.back()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auto-batch-samples ", options.auto_batch_samples,
                     " must be at least the largest candidate (", sizes.back(),
                     ") so that every candidate takes a step"));
  }
  return absl::OkStatus();
}

absl::Status CheckWarmupBatchOptions(const TrainerOptions& options) {
  if (options.warmup_batch < 0 || !(options.warmup_fraction > 0 && options.warmup_fraction <= 1)) {
    return absl::InvalidArgumentError(
        "--warmup-batch must be >= 0 and --warmup-fraction in (0, 1]");
  }
  return absl::OkStatus();
}

uint64_t WarmupMessages(const TrainerOptions& options, size_t train_count) {
  const size_t batch =
      static_cast<size_t>(options.warmup_batch > 0 ? options.warmup_batch : options.batch);
  uint64_t messages = options.pretrain_samples > 0 ? 1 : 0;
  for (int shard = 0; shard < options.start_workers; ++shard) {
    const size_t size = ShardSize(train_count, shard, options.shards);
    messages += static_cast<size_t>(options.warmup_fraction * double(size)) / batch;
  }
  return std::max<uint64_t>(1, messages);
}

absl::StatusOr<TrainSummary> RunTraining(const TrainerOptions& options, std::ostream& log) {
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(options, log));
  return trainer->Run();
}

Trainer::Trainer(const TrainerOptions& options, std::ostream& log)
    : options_(options), log_(log), config_(options.backend_config), step_now_(config_.step) {
  batch_ = options.batch;
  config_.max_batch = std::max(options.batch, options.warmup_batch);
  for (const int b : options.auto_batch) config_.max_batch = std::max(config_.max_batch, b);
  momentum_now_ = config_.optimizer.momentum;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options,
                                                         std::ostream& log) {
  if (options.batch < 1 || options.epochs < 0) {
    return absl::InvalidArgumentError("--batch must be >= 1 and --epochs >= 0");
  }
  RECKON_RETURN_IF_ERROR(CheckWarmupBatchOptions(options));
  RECKON_RETURN_IF_ERROR(CheckAutoBatchOptions(options));
  std::unique_ptr<Trainer> trainer(new Trainer(options, log));
  RECKON_RETURN_IF_ERROR(trainer->LoadData());
  if (options.peers != nullptr) options.peers->DescribeInput(trainer->input_);
  RECKON_RETURN_IF_ERROR(trainer->MakeReplica());
  if (!options.resume_path.empty()) RECKON_RETURN_IF_ERROR(trainer->Resume());
  return trainer;
}

absl::Status Trainer::LoadNpyData() {
  const model::ModelShape& shape = config_.shape;
  const std::string& dir = options_.data_dir;
  RECKON_ASSIGN_OR_RETURN(const NpyDatasetShape data, InspectNpyDataset(dir));
  if (data.features != uint64_t(shape.inputs())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model takes ", shape.inputs(), " inputs (--layers) but ", dir, " has ", data.features,
        " features a sample: give --layers ", data.features, ",...,CLASSES"));
  }
  auto name_classes = [&](const absl::Status& s) {
    if (s.code() != absl::StatusCode::kDataLoss) return s;
    return absl::Status(s.code(), absl::StrCat(s.message(), " (the model, --layers, has ",
                                               shape.classes(), " classes)"));
  };
  if (options_.data_in_memory) {
    absl::StatusOr<Dataset> train = LoadNpyDataset(data, "train", shape.classes());
    if (!train.ok()) return name_classes(train.status());
    absl::StatusOr<Dataset> test = LoadNpyDataset(data, "test", shape.classes());
    if (!test.ok()) return name_classes(test.status());
    // Each feature standardized by the training split's statistics: the
    // same numbers on every worker, which all read the same files.
    input_ = TransformOf(ComputeFeatureStats(*train));
    Standardize(input_, &*train);
    Standardize(input_, &*test);
    train_ = std::make_unique<InMemorySamples>(std::move(*train));
    test_ = std::make_unique<InMemorySamples>(std::move(*test));
    return absl::OkStatus();
  }
  // Mapped, read as the epochs ask (samples.h): checked and its statistics
  // taken in one pass each, the same numbers as in memory.
  MappedSplitScan scan;
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> train =
      MappedNpySamples::Open(data, "train", shape.classes(), &scan);
  if (!train.ok()) return name_classes(train.status());
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> test =
      MappedNpySamples::Open(data, "test", shape.classes());
  if (!test.ok()) return name_classes(test.status());
  input_ = TransformOf(scan.stats);
  (*train)->SetTransform(input_);
  (*test)->SetTransform(input_);
  train_ = std::move(*train);
  test_ = std::move(*test);
  return absl::OkStatus();
}

absl::Status Trainer::LoadData() {
  const model::ModelShape& shape = config_.shape;
  if (IsNpyDataset(options_.data_dir)) {
    RECKON_RETURN_IF_ERROR(LoadNpyData());
  } else {
    RECKON_ASSIGN_OR_RETURN(Dataset train, LoadIdxDataset(options_.data_dir, "train"));
    RECKON_ASSIGN_OR_RETURN(Dataset test, LoadIdxDataset(options_.data_dir, "t10k"));
    if (train.features() != shape.inputs() || test.features() != shape.inputs()) {
      return absl::InvalidArgumentError(absl::StrCat("the model takes ", shape.inputs(),
                                                     " inputs but the images have ",
                                                     train.features(), " pixels"));
    }
    input_ = TransformOf(ComputePixelStats(train), shape.inputs());
    Standardize(input_, &train);
    Standardize(input_, &test);
    train_ = std::make_unique<InMemorySamples>(std::move(train));
    test_ = std::make_unique<InMemorySamples>(std::move(test));
  }
  RECKON_ASSIGN_OR_RETURN(
      shard_, ShardIndices(train_->size(), options_.shard, options_.shards, options_.seed));
  if (shard_.size() < static_cast<size_t>(config_.max_batch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", options_.shard, "/", options_.shards, " has ", shard_.size(),
                     " samples, fewer than one batch of ", config_.max_batch));
  }
  if (options_.pretrain_samples < 0 || size_t(options_.pretrain_samples) > shard_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pretrain-samples ", options_.pretrain_samples, ": shard ", options_.shard, "/",
        options_.shards, " has ", shard_.size(), " samples (give 0 to ", shard_.size(), ")"));
  }
  order_ = shard_;
  eval_count_ = options_.eval_samples > 0 ? std::min<size_t>(options_.eval_samples, test_->size())
                                          : test_->size();
  batch_images_.resize(size_t(config_.max_batch) * shape.inputs());
  batch_labels_.resize(config_.max_batch);
  if (!options_.auto_batch.empty()) {
    if (shard_.size() < static_cast<size_t>(options_.auto_batch_samples)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auto-batch-samples ", options_.auto_batch_samples, ": shard ", options_.shard, "/",
          options_.shards, " has only ", shard_.size(), " samples"));
    }
    // The judges: a fixed seeded draw from this worker's shard, the same
    // for every selection (Seide judges by training-set accuracy).
    std::vector<uint32_t> judges = shard_;
    SeededShuffle(judges, options_.seed * 0xD1B54A32D192ED03ull + 0x5EEDull);
    judges.resize(std::min<size_t>(judges.size(), options_.auto_batch_eval));
    judge_images_.resize(judges.size() * static_cast<size_t>(shape.inputs()));
    judge_labels_.resize(judges.size());
    train_->Gather(judges, judge_images_.data(), judge_labels_.data());
  }
  return absl::OkStatus();
}

// The backend, holding the replica every worker starts from (the seed's).
absl::Status Trainer::MakeReplica() {
  const model::ModelShape& shape = config_.shape;
  std::string chosen;
  RECKON_ASSIGN_OR_RETURN(backend_, MakeBackend(options_.backend, config_, &chosen));
  if (options_.fault_corrupt_weight_at_step != 0) {
    backend_ =
        WithWeightCorruption(std::move(backend_), options_.fault_corrupt_weight_at_step, log_);
  }
  if (options_.wrap_backend) backend_ = options_.wrap_backend(std::move(backend_));
  log_ << "reckon-worker: backend " << chosen << "\n";
  if (options_.metrics != nullptr) {
    const std::string device = backend_->Describe();
    options_.metrics->SetBuildInfo(device.substr(0, device.find(' ')),
                                   CodecName(config_.mode, options_.wire_codec), device);
  }
  RECKON_ASSIGN_OR_RETURN(const std::vector<int64_t> initial,
                          model::InitialWeights(shape, config_.fraction_bits, options_.seed));
  RECKON_RETURN_IF_ERROR(backend_->LoadWeights(initial));

  if (config_.mode == model::UpdateMode::kThreshold && options_.target_density > 0) {
    controller_.emplace(options_.target_density, shape.param_count());
  }
  message_.mutable_origin()->set_node_id(options_.node_id);
  message_.mutable_origin()->set_incarnation(options_.incarnation);
  match_momentum_ = options_.peers != nullptr && options_.match_momentum_to_cluster &&
                    config_.optimizer.kind == model::OptimizerKind::kMomentum;
  summary_.backend = backend_->Describe();
  summary_.model = shape.ToString();
  summary_.params = shape.param_count();
  summary_.codec = CodecName(config_.mode, options_.wire_codec);
  summary_.momentum_matched = match_momentum_;
  if (config_.mode == model::UpdateMode::kThreshold) {
    summary_.threshold = options_.threshold;
    summary_.target_density = options_.target_density;
  }
  return absl::OkStatus();
}

CheckpointIdentity Trainer::Identity() const {
  CheckpointIdentity id;
  id.model = config_.shape.ToString();
  id.input = input_;
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
  if (state.samples_into_epoch < 0 || size_t(state.samples_into_epoch) > shard_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--resume ", path, ": it stopped at sample ", state.samples_into_epoch,
                     " of epoch ", state.epochs_done + 1, " but shard ", options_.shard, "/",
                     options_.shards, " has ", shard_.size(), " samples"));
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
       << resume_position_ << " of " << shard_.size() << ", step " << steps_done_ << "\n";
  return absl::OkStatus();
}

absl::StatusOr<TrainSummary> Trainer::Run() {
  // Alone, seqs continue the step count (see published_).
  published_ = options_.peers != nullptr ? 0 : static_cast<uint64_t>(steps_done_);
  if (options_.peers != nullptr) ContinueShard();
  RECKON_RETURN_IF_ERROR(MaybePretrain());
  for (int epoch = first_epoch_; epoch < options_.epochs && !stopped_; ++epoch) {
    // --max-steps reached on the previous epoch's last step: no empty epoch
    // (its log line, its summary and its checkpoint would all be wrong).
    if (options_.max_steps > 0 && steps_done_ >= options_.max_steps) break;
    RECKON_ASSIGN_OR_RETURN(const EpochTally tally, RunEpoch(epoch));
    RECKON_RETURN_IF_ERROR(EndEpoch(epoch, tally));
    if (!options_.checkpoint_path.empty()) {
      RECKON_RETURN_IF_ERROR(SaveCheckpointAt(epoch, tally));
      checkpointed_.emplace(epoch, tally);
    }
  }
  if (options_.peers != nullptr) {
    RECKON_RETURN_IF_ERROR(FinishWithPeers());
    // The checkpoint was this worker's replica at its last step; the peers'
    // last messages came after. What reckonctl export takes from it must be
    // the cluster's final replica, the one the summary reports.
    if (checkpointed_ && summary_.final_replica) {
      RECKON_RETURN_IF_ERROR(SaveCheckpointAt(checkpointed_->first, checkpointed_->second));
      log_ << "reckon-worker: checkpoint " << options_.checkpoint_path
           << " holds the cluster's final replica\n";
    }
  } else {
    summary_.final_replica = !summary_.stopped_early;
  }
  return Summarize();
}

absl::Status Trainer::Serve(const std::function<absl::Status(const TrainSummary&)>& report) {
  if (options_.stop == nullptr) return absl::FailedPreconditionError("Serve needs a stop flag");
  if (options_.peers != nullptr) {
    return options_.peers->Serve(*backend_, *options_.stop,
                                 [&] { return ReportNewAgreement(report); });
  }
  while (!options_.stop->load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return absl::OkStatus();
}

absl::Status Trainer::ReportNewAgreement(
    const std::function<absl::Status(const TrainSummary&)>& report) {
  const uint64_t before = TotalSteps(summary_.version_vector);
  RECKON_RETURN_IF_ERROR(Evaluate());
  summary_.version_vector = options_.peers->VersionVector();
  summary_.node_counters = options_.peers->Counters();
  summary_.final_replica = true;
  ++summary_.agreements;
  RECKON_ASSIGN_OR_RETURN(const std::string hash, backend_->WeightHash());
  log_ << absl::StrFormat(
      "cluster agreed again (agreement %d: %d more steps, from a member that was cut off or "
      "restarted): test %.2f%%  weights %s\n",
      summary_.agreements, TotalSteps(summary_.version_vector) - before,
      100 * summary_.test_accuracy, hash.substr(0, 16));
  // The checkpoint follows the summary: what reckonctl export takes from
  // it is the replica the cluster agreed on last.
  if (checkpointed_) {
    RECKON_RETURN_IF_ERROR(SaveCheckpointAt(checkpointed_->first, checkpointed_->second));
    log_ << "reckon-worker: checkpoint " << options_.checkpoint_path
         << " holds the cluster's final replica (agreement " << summary_.agreements << ")\n";
  }
  RECKON_ASSIGN_OR_RETURN(const TrainSummary summary, Summarize());
  RECKON_RETURN_IF_ERROR(report(summary));
  log_ << std::flush;  // a serving worker's log is read while it runs
  return absl::OkStatus();
}

absl::Status Trainer::MaybePretrain() {
  if (options_.pretrain_samples == 0 || holds_pretrained_ || steps_done_ > 0) {
    return absl::OkStatus();
  }
  if (options_.peers != nullptr && (options_.shard != 0 || options_.peers->HoldsMessages())) {
    return absl::OkStatus();  // joined from a snapshot that holds the start
  }
  const Clock::time_point start = Clock::now();
  // The first pretrain_samples of a seeded shuffle of the shard, its own
  // (not the first epoch's order).
  std::vector<uint32_t> samples = shard_;
  SeededShuffle(samples, options_.seed * 0xA0761D6478BD642Full + 0x9E7Aull);
  samples.resize(static_cast<size_t>(options_.pretrain_samples));
  PretrainOptions p;
  p.config = config_;
  p.backend = options_.backend;
  p.seed = options_.seed;
  p.batch = options_.warmup_batch > 0 ? options_.warmup_batch : options_.batch;
  p.learning_rate = static_cast<float>(config_.optimizer.learning_rate * BatchSizeFactor(p.batch));
  p.stop = options_.stop;
  p.wrap_backend = options_.wrap_backend;
  absl::StatusOr<std::vector<int64_t>> pretrained = PretrainLayerwise(p, *train_, samples, log_);
  summary_.pretrain_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (pretrained.status().code() == absl::StatusCode::kCancelled) {
    // SIGTERM: nothing published; the epoch loop stops before its first step.
    log_ << "reckon-worker: " << pretrained.status().message() << "\n";
    return absl::OkStatus();
  }
  if (!pretrained.ok()) return pretrained.status();
  if (options_.peers != nullptr && options_.peers->HoldsMessages()) {
    // Another worker started the cluster meanwhile (two of shard 0): its
    // start stands; a second one would add to it.
    log_ << "reckon-worker: another worker started the cluster while this one pre-trained; "
            "its start stands and this pre-training is dropped (give shard 0 to one worker)\n";
    return absl::OkStatus();
  }
  RECKON_RETURN_IF_ERROR(StartFrom(*pretrained));
  summary_.pretrained = true;
  holds_pretrained_ = true;
  RECKON_RETURN_IF_ERROR(Evaluate());
  log_ << absl::StrFormat(
      "reckon-worker: pre-trained on %d samples a stage in %.1f s: test %.2f%% before the first "
      "step%s\n",
      options_.pretrain_samples, summary_.pretrain_seconds, 100 * summary_.test_accuracy,
      options_.peers != nullptr ? absl::StrFormat(", published to the cluster (%s)",
                                                  HumanBytes(double(summary_.pretrain_start_bytes)))
                                : "");
  return absl::OkStatus();
}

absl::Status Trainer::StartFrom(std::span<const int64_t> pretrained) {
  RECKON_ASSIGN_OR_RETURN(const std::vector<int64_t> now, backend_->ReadWeights());
  std::vector<float> delta(now.size());
  for (size_t i = 0; i < now.size(); ++i) {
    delta[i] =
        static_cast<float>(std::ldexp(double(pretrained[i] - now[i]), -config_.fraction_bits));
  }
  codec::CodecOptions dense = model::FilledCodecOptions(config_);
  dense.codec = v1::CODEC_DENSE_FP32;
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<codec::Codec> encoder, codec::MakeCodec(dense));
  RECKON_RETURN_IF_ERROR(
      codec::EncodeWithFeedback(*encoder, dense, delta, &emission_.encoded, &emission_.dense));
  // Alone, nothing is numbered or sent (seqs follow the steps, see
  // published_); the replica ends where a cluster's would.
  if (options_.peers == nullptr) return backend_->ApplyDense(emission_.dense);
  EpochTally sent;
  RECKON_RETURN_IF_ERROR(ApplyAndPublishQuanta(sent));
  summary_.pretrain_start_bytes = sent.wire_bytes;
  return absl::OkStatus();
}

absl::StatusOr<Trainer::EpochTally> Trainer::RunEpoch(int epoch) {
  // The same order on every platform for (seed, epoch).
  std::copy(shard_.begin(), shard_.end(), order_.begin());
  SeededShuffle(order_, options_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
  // The selection's time counts in the epoch's: samples/s stays the rate of
  // the whole run.
  EpochTally tally;
  // Resumed inside this epoch: its batch size was chosen before the stop
  // (the checkpoint's), and it goes on from where the stop left it.
  const bool resumed_inside = epoch == first_epoch_ && resume_position_ > 0;
  tally.position = resumed_inside ? resume_position_ : 0;
  resume_position_ = 0;
  if (!options_.auto_batch.empty() && epoch % options_.auto_batch_every == 0 && !resumed_inside &&
      !StopBeforeStep()) {
    const absl::Status selected = SelectBatch(epoch);
    if (selected.code() == absl::StatusCode::kCancelled) {
      // SIGTERM inside a trial: nothing of the run changed; a resume tries
      // again from the same replica and chooses as this one would have.
      log_ << "reckon-worker: " << selected.message() << "\n";
      summary_.stopped_early = true;
      stopped_ = true;
      return tally;
    }
    RECKON_RETURN_IF_ERROR(selected);
  }
  // Steps by position in the order, so that a run resumed at any sample
  // (even with another --batch) takes the same samples next.
  for (;;) {
    const int batch = BatchAt(epoch, tally.position);
    if (batch == 0) {
      tally.complete = true;
      break;
    }
    if (StopBeforeStep()) break;
    const absl::Status stepped = Step(epoch, tally.position, batch, tally);
    if (stepped.code() == absl::StatusCode::kCancelled && options_.stop != nullptr &&
        options_.stop->load()) {
      // SIGTERM while re-joining from a snapshot before the step: the step
      // was not taken; the replica is the one the cluster asked to replace,
      // so a restarted worker joins afresh.
      log_ << "reckon-worker: " << stepped.message() << "\n";
      summary_.stopped_early = true;
      stopped_ = true;
      break;
    }
    RECKON_RETURN_IF_ERROR(stepped);
    tally.position += size_t(batch);
    DrawProgressBar(epoch, tally);
  }
  return tally;
}

int Trainer::BatchAt(int epoch, size_t position) const {
  const int batch = position < Layout(epoch).ramp_samples ? options_.warmup_batch : batch_;
  return position + size_t(batch) > shard_.size() ? 0 : batch;
}

Trainer::EpochLayout Trainer::Layout(int epoch) const {
  EpochLayout layout;
  const size_t warmup_batch = static_cast<size_t>(options_.warmup_batch);
  // A worker that joins after the warm-up (--start-workers) has no ramp.
  const bool starts = options_.start_workers == 0 || options_.shard < options_.start_workers;
  if (epoch == 0 && warmup_batch > 0 && starts) {
    layout.ramp_steps =
        static_cast<size_t>(options_.warmup_fraction * double(shard_.size())) / warmup_batch;
  }
  layout.ramp_samples = layout.ramp_steps * warmup_batch;
  layout.steps =
      layout.ramp_steps + (shard_.size() - layout.ramp_samples) / static_cast<size_t>(batch_);
  return layout;
}

void Trainer::ContinueShard() {
  uint64_t published = options_.peers->PublishedByEarlierLives();
  // In a pre-training cluster shard 0's first message is the start, not a step.
  if (published > 0 && options_.pretrain_samples > 0 && options_.shard == 0) --published;
  if (published == 0) return;
  const std::string shard = absl::StrCat(options_.shard, "/", options_.shards);
  if (!options_.auto_batch.empty()) {
    // The sizes its earlier lives chose are not in the messages: where their
    // steps end in the shard is unknown.
    log_ << "reckon-worker: WARNING: " << published << " steps of shard " << shard
         << " were published by its earlier lives, but with --auto-batch where they end in the "
            "shard is not known: this life starts its epochs again, and the cluster trains "
            "those samples twice\n";
    return;
  }
  uint64_t left = published;
  int epoch = 0;
  for (; epoch < options_.epochs; ++epoch) {
    const EpochLayout layout = Layout(epoch);
    if (left < layout.steps) break;
    left -= layout.steps;
  }
  size_t position = 0;
  if (epoch < options_.epochs) {
    const EpochLayout layout = Layout(epoch);
    position = left < layout.ramp_steps
                   ? size_t(left) * size_t(options_.warmup_batch)
                   : layout.ramp_samples + size_t(left - layout.ramp_steps) * size_t(batch_);
  }
  first_epoch_ = epoch;
  resume_position_ = position;
  steps_done_ = static_cast<int64_t>(published);
  summary_.epochs = epoch;
  log_ << "reckon-worker: " << published << " steps of shard " << shard
       << " published by its earlier lives: continues at "
       << (epoch < options_.epochs
               ? absl::StrCat("epoch ", epoch + 1, ", sample ", position, " of ", shard_.size())
               : std::string("its end (every epoch is trained)"))
       << "\n";
}

bool Trainer::StopBeforeStep() {
  if (options_.max_steps > 0 && steps_done_ >= options_.max_steps) {
    stopped_ = true;
  } else if (options_.stop != nullptr && options_.stop->load()) {
    summary_.stopped_early = true;
    stopped_ = true;
  }
  return stopped_;
}

// docs/design.md "One worker, one step": peers' messages first, then the
// batch, forward/backward and the optimizer into the residual (the step in
// halves: while the device computes, the next batch is gathered and staged),
// then the emission, applied here and sent.
absl::Status Trainer::Step(int epoch, size_t first, int batch, EpochTally& tally) {
  if (options_.peers != nullptr) {
    RECKON_RETURN_IF_ERROR(
        options_.peers->BeforeStep(*backend_, static_cast<uint64_t>(steps_done_)));
  }
  if (match_momentum_) RematchMomentum();
  const Clock::time_point start = Clock::now();
  absl::StatusOr<model::BatchStats> stats = TrainOn(epoch, first, batch);
  if (!stats.ok()) {
    return absl::Status(stats.status().code(),
                        absl::StrCat("epoch ", epoch + 1, " step ", steps_done_ + 1, ": ",
                                     stats.status().message()));
  }
  tally.loss_sum += stats->loss_sum;
  tally.samples += batch;
  ++tally.steps;
  ++steps_done_;
  RECKON_RETURN_IF_ERROR(ApplyAndPublish(tally));
  if (options_.metrics != nullptr) {
    options_.metrics->OnStep(std::chrono::duration<double>(Clock::now() - start).count(), batch,
                             stats->loss_sum);
  }
  return absl::OkStatus();
}

void Trainer::RematchMomentum() {
  const int members = std::max(1, options_.peers->TrainingMembers());
  if (members == matched_members_) return;
  const model::MomentumRule rule =
      model::MatchMomentumToCluster(1.0, config_.optimizer.momentum, members);
  backend_->SetMomentum(rule.momentum);
  momentum_now_ = rule.momentum;
  lr_scale_ = rule.learning_rate;
  matched_members_ = members;
  summary_.max_training_members = std::max(summary_.max_training_members, members);
  log_ << absl::StrFormat(
      "reckon-worker: %d workers training: momentum %.4g per own step, learning rate x%.3g "
      "(matched to one worker's momentum %.4g)\n",
      members, rule.momentum, rule.learning_rate, config_.optimizer.momentum);
}

double Trainer::BatchSizeFactor(int batch) const {
  return batch == options_.batch
             ? 1.0
             : std::pow(double(batch) / options_.batch, options_.auto_batch_lr_power);
}

float Trainer::StepLearningRate(int epoch, int batch) const {
  return static_cast<float>(lr_scale_ * model::LearningRate(config_.optimizer, epoch, steps_done_) *
                            BatchSizeFactor(batch));
}

absl::StatusOr<model::BatchStats> Trainer::TrainOn(int epoch, size_t first, int batch) {
  const bool staged_ahead = staged_ == StagedBatch{epoch, first, batch};
  staged_ = StagedBatch{};  // taken by this step, or never
  if (!staged_ahead) {
    FillBatch(first, batch);
    RECKON_RETURN_IF_ERROR(backend_->StageBatch(BatchImages(batch), BatchLabels(batch)));
  }
  RECKON_RETURN_IF_ERROR(backend_->LaunchTrainStep(StepLearningRate(epoch, batch), &emission_));
  StageAhead(epoch, first + size_t(batch));
  return backend_->FinishTrainStep();
}

void Trainer::StageAhead(int epoch, size_t position) {
  const int batch = BatchAt(epoch, position);
  if (batch == 0) return;  // the epoch's last step: the next order is not drawn yet
  FillBatch(position, batch);
  // A refusal (a label outside the classes) stages nothing: the step that
  // trains this batch fills and stages it again and reports it there.
  if (backend_->StageBatch(BatchImages(batch), BatchLabels(batch)).ok()) {
    staged_ = StagedBatch{epoch, position, batch};
  }
}

void Trainer::FillBatch(size_t first, int batch) {
  const std::span<const uint32_t> order(order_);
  train_->Gather(order.subspan(first, size_t(batch)), batch_images_.data(), batch_labels_.data());
  // The batches after this one, read ahead while it trains (a mapped
  // dataset; in memory, nothing to do): each row asked for once, as it
  // comes within kBatchesReadAhead batches. A new epoch (or a resume)
  // starts again where it begins.
  const size_t end = first + size_t(batch);
  if (first < read_ahead_from_ || read_ahead_until_ < end) read_ahead_until_ = end;
  read_ahead_from_ = first;
  const size_t ahead = std::min(order.size(), end + size_t(batch) * kBatchesReadAhead);
  if (read_ahead_until_ < ahead) {
    train_->WillNeed(order.subspan(read_ahead_until_, ahead - read_ahead_until_));
    read_ahead_until_ = ahead;
  }
}

// Seide 2014 section 4: "process the next [slice] at different minibatch
// sizes and pick the largest N that does not hurt convergence, based on
// training-set frame accuracy". Each candidate trains a fresh backend from
// this worker's replica, residual and optimizer state on the first
// auto_batch_samples of this epoch's order (which the epoch then trains on
// as usual), applying its own emissions to itself only: nothing reaches the
// peers, so the replicas cannot fork, and peers' messages wait in the inbox.
// A fresh backend per candidate leaves this one's state (codec, aggregate
// AdaGrad) untouched, and makes a resumed run choose as the uninterrupted one.
absl::Status Trainer::SelectBatch(int epoch) {
  RECKON_ASSIGN_OR_RETURN(const std::vector<int64_t> weights, backend_->ReadWeights());
  RECKON_ASSIGN_OR_RETURN(const std::vector<float> residual, backend_->ReadResidual());
  RECKON_ASSIGN_OR_RETURN(const std::vector<float> optimizer_state, backend_->ReadOptimizerState());
  std::vector<std::pair<int, double>> tried;
  double best = -1;
  for (const int candidate : options_.auto_batch) {
    RECKON_ASSIGN_OR_RETURN(const double accuracy,
                            TryBatch(epoch, candidate, weights, residual, optimizer_state));
    tried.emplace_back(candidate, accuracy);
    best = std::max(best, accuracy);
  }
  int chosen = options_.auto_batch.front();
  for (const auto& [candidate, accuracy] : tried) {
    if (accuracy >= best - options_.auto_batch_tolerance) chosen = candidate;
  }
  std::string line = absl::StrFormat(
      "reckon-worker: epoch %d batch by accuracy on %zu training samples after %d:", epoch + 1,
      judge_labels_.size(), static_cast<int>(options_.auto_batch_samples));
  for (const auto& [candidate, accuracy] : tried) {
    absl::StrAppendFormat(&line, " %d %.2f%%", candidate, 100 * accuracy);
  }
  log_ << line << " -> batch " << chosen << "\n";
  batch_ = chosen;
  summary_.batch_choices.push_back(chosen);
  return absl::OkStatus();
}

// One candidate's trial: its accuracy on the judges, or 0 when the trial
// diverged (a residual of NaN: that size hurts convergence by definition).
absl::StatusOr<double> Trainer::TryBatch(int epoch, int batch, const std::vector<int64_t>& weights,
                                         const std::vector<float>& residual,
                                         const std::vector<float>& optimizer_state) {
  std::string chosen;
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> trial,
                          MakeBackend(options_.backend, config_, &chosen));
  if (options_.wrap_backend) trial = options_.wrap_backend(std::move(trial));
  RECKON_RETURN_IF_ERROR(trial->LoadWeights(weights));
  RECKON_RETURN_IF_ERROR(trial->LoadTrainingState(residual, optimizer_state));
  trial->SetThresholdStep(step_now_);
  trial->SetMomentum(momentum_now_);
  model::Emission out;
  const float lr = StepLearningRate(epoch, batch);
  const int64_t steps = options_.auto_batch_samples / batch;
  for (int64_t k = 0; k < steps; ++k) {
    if (options_.stop != nullptr && options_.stop->load()) {
      return absl::CancelledError(absl::StrCat("stopped by a signal while trying batch size ",
                                               batch, " for epoch ", epoch + 1));
    }
    FillBatch(size_t(k) * batch, batch);
    absl::StatusOr<model::BatchStats> stats =
        trial->TrainStep(batch_images_.data(), batch_labels_.data(), batch, lr, &out);
    if (stats.status().code() == absl::StatusCode::kInvalidArgument) return 0.0;  // diverged
    RECKON_RETURN_IF_ERROR(stats.status());
    RECKON_RETURN_IF_ERROR(config_.mode == model::UpdateMode::kThreshold
                               ? trial->ApplyUpdates(step_now_.step_quanta, out.words)
                               : trial->ApplyDense(out.dense));
  }
  RECKON_ASSIGN_OR_RETURN(
      const model::BatchStats judged,
      trial->Evaluate(judge_images_.data(), judge_labels_.data(), judge_labels_.size()));
  return double(judged.correct) / double(judge_labels_.size());
}

// A quanta codec's emission (codec/codec.h): the backend encoded it and
// computed its decoded quanta (what every peer decodes from these bytes:
// codec/ tests and fuzzes that contract, and every receiver checks the
// checksum_delta made from them against its own decode), so this numbers
// it, applies the quanta here and sends it, with no decode of its own.
absl::Status Trainer::ApplyAndPublishQuanta(EpochTally& tally) {
  const uint64_t params = config_.shape.param_count();
  v1::Update& encoded = emission_.encoded;
  message_.set_seq(++published_);
  message_.set_codec(encoded.codec());
  message_.set_param_count(encoded.param_count());
  message_.set_count(encoded.count());
  message_.set_rice_k(0);
  message_.set_step_quanta(0);
  message_.mutable_payload()->swap(*encoded.mutable_payload());
  message_.set_crc32c(encoded.crc32c());
  decoded_.node_id = options_.node_id;
  decoded_.incarnation = options_.incarnation;
  decoded_.seq = published_;
  decoded_.codec = encoded.codec();
  decoded_.param_count = params;
  decoded_.step_quanta = 0;
  decoded_.words.clear();
  decoded_.quanta.swap(emission_.dense);
  RECKON_RETURN_IF_ERROR(backend_->ApplyDense(decoded_.quanta));
  if (options_.peers != nullptr)
    RECKON_RETURN_IF_ERROR(options_.peers->Publish(message_, decoded_));
  const size_t bytes = message_.ByteSizeLong();
  tally.updates += params;
  tally.wire_bytes += bytes;
  if (options_.metrics != nullptr) {
    options_.metrics->OnEmitted(codec::CodecFlagName(encoded.codec()), params, bytes,
                                params * sizeof(float), 1.0, 0);
  }
  return absl::OkStatus();
}

absl::Status Trainer::ApplyAndPublish(EpochTally& tally) {
  if (config_.mode == model::UpdateMode::kCodec) return ApplyAndPublishQuanta(tally);
  const uint64_t dense_bytes = config_.shape.param_count() * sizeof(float);
  message_.set_seq(++published_);
  RECKON_RETURN_IF_ERROR(codec::EncodeThresholdUpdate(emission_.words, step_now_.step_quanta,
                                                      config_.shape.param_count(),
                                                      options_.wire_codec, &message_));
  RECKON_RETURN_IF_ERROR(codec::DecodeUpdate(message_, &decoded_));
  RECKON_RETURN_IF_ERROR(backend_->ApplyOwnEmission(decoded_.step_quanta, decoded_.words));
  if (options_.peers != nullptr)
    RECKON_RETURN_IF_ERROR(options_.peers->Publish(message_, decoded_));
  tally.updates += decoded_.words.size();
  tally.wire_bytes += message_.ByteSizeLong();
  if (options_.metrics != nullptr) {
    options_.metrics->OnEmitted(
        options_.wire_codec == v1::CODEC_THRESHOLD_RICE ? "rice" : "packed32",
        decoded_.words.size(), message_.ByteSizeLong(), dense_bytes,
        double(decoded_.words.size()) / double(config_.shape.param_count()), step_now_.tau);
  }
  if (controller_) {
    step_now_ = controller_->Next(step_now_, decoded_.words.size());
    backend_->SetThresholdStep(step_now_);
  }
  return absl::OkStatus();
}

void Trainer::DrawProgressBar(int epoch, EpochTally& tally) {
  if (!options_.progress_bar || Clock::now() - tally.last_bar < std::chrono::milliseconds(200)) {
    return;
  }
  tally.last_bar = Clock::now();
  const int width = 30;
  const double done_fraction = double(tally.position) / double(shard_.size());
  const int done = std::min(width, static_cast<int>(width * done_fraction));
  log_ << absl::StrFormat("\r  epoch %d/%d [%s%s] %3d%%  loss %.4f", epoch + 1, options_.epochs,
                          std::string(done, '='), std::string(width - done, ' '),
                          static_cast<int>(100 * done_fraction), tally.loss_sum / tally.samples)
       << std::flush;
}

absl::Status Trainer::EndEpoch(int epoch, const EpochTally& tally) {
  const double seconds = std::chrono::duration<double>(Clock::now() - tally.start).count();
  if (options_.progress_bar) log_ << "\r" << std::string(72, ' ') << "\r";
  if (!tally.complete && tally.steps == 0) {
    // Stopped before this epoch's first step: nothing to report or evaluate.
    log_ << "reckon-worker: stopped before epoch " << epoch + 1 << " (sample " << tally.position
         << " of " << shard_.size() << ", step " << steps_done_ << ")\n";
    return absl::OkStatus();
  }
  summary_.samples += tally.samples;
  summary_.train_seconds += seconds;
  summary_.updates_sent += tally.updates;
  summary_.wire_bytes += tally.wire_bytes;
  summary_.train_loss = tally.samples ? tally.loss_sum / tally.samples : 0;
  summary_.epochs = tally.complete ? epoch + 1 : epoch;
  RECKON_RETURN_IF_ERROR(Evaluate());
  if (options_.metrics != nullptr) {
    options_.metrics->OnEpoch(summary_.epochs, summary_.train_loss, summary_.test_loss,
                              summary_.test_accuracy);
  }
  const double steps = double(tally.steps);
  const double dense_bytes = steps * double(config_.shape.param_count() * sizeof(float));
  const std::string stopped = tally.complete ? ""
                                             : absl::StrFormat(" stopped at sample %d of %d",
                                                               tally.position, shard_.size());
  log_ << absl::StrFormat(
              "epoch %d/%d%s  loss %.4f  test %.2f%%  %.0f samples/s  density %.2e  tau %.3g  "
              "wire %s  dense %s  (%.0fx)",
              epoch + 1, options_.epochs, stopped, summary_.train_loss,
              100 * summary_.test_accuracy, tally.samples / seconds,
              steps > 0 ? double(tally.updates) / (steps * config_.shape.param_count()) : 0.0,
              config_.mode == model::UpdateMode::kThreshold ? double(step_now_.tau) : 0.0,
              HumanBytes(tally.wire_bytes), HumanBytes(dense_bytes),
              tally.wire_bytes ? dense_bytes / tally.wire_bytes : 0.0)
       << std::endl;
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
absl::Status Trainer::FinishWithPeers() {
  const absl::Status finished =
      options_.peers->Finish(*backend_, static_cast<uint64_t>(steps_done_), options_.stop);
  // Stopped (SIGTERM) before the cluster agreed: the summary still says
  // which replica this is (its vector and hash), marked not final.
  const bool stopped = finished.code() == absl::StatusCode::kCancelled;
  if (!finished.ok() && !stopped) return finished;
  RECKON_RETURN_IF_ERROR(Evaluate());
  if (options_.metrics != nullptr) {
    options_.metrics->OnEpoch(summary_.epochs, summary_.train_loss, summary_.test_loss,
                              summary_.test_accuracy);
  }
  summary_.node_id = options_.node_id;
  summary_.incarnation = options_.incarnation;
  summary_.version_vector = options_.peers->VersionVector();
  summary_.node_counters = options_.peers->Counters();
  summary_.stopped_early = summary_.stopped_early || stopped;
  summary_.final_replica = !summary_.stopped_early;
  summary_.agreements = summary_.final_replica ? 1 : 0;
  RECKON_ASSIGN_OR_RETURN(const std::string hash, backend_->WeightHash());
  if (summary_.final_replica) {
    log_ << absl::StrFormat("cluster quiescent: test %.2f%%  weights %s\n",
                            100 * summary_.test_accuracy, hash.substr(0, 16));
  } else {
    log_ << absl::StrFormat(
        "reckon-worker: stopped by a signal before the cluster agreed it is done: this replica "
        "(test %.2f%%, weights %s, version vector %s) is not final; a restarted worker re-joins "
        "from a peer\n",
        100 * summary_.test_accuracy, hash.substr(0, 16), summary_.version_vector.dump());
  }
  return absl::OkStatus();
}

absl::Status Trainer::Evaluate() {
  // In chunks of at most 64 MiB of features, whether the test split is in
  // memory or mapped (the same sums either way); Fashion-MNIST's is one.
  const size_t width = static_cast<size_t>(config_.shape.inputs());
  const size_t chunk = std::max<size_t>(1, (size_t{64} << 20) / (sizeof(float) * width));
  std::vector<float> images(std::min(chunk, eval_count_) * width);
  std::vector<int32_t> labels(std::min(chunk, eval_count_));
  int64_t correct = 0;
  double loss_sum = 0;
  for (size_t first = 0; first < eval_count_; first += chunk) {
    const size_t count = std::min(chunk, eval_count_ - first);
    test_->Range(first, count, images.data(), labels.data());
    RECKON_ASSIGN_OR_RETURN(const model::BatchStats eval,
                            backend_->Evaluate(images.data(), labels.data(), count));
    correct += eval.correct;
    loss_sum += eval.loss_sum;
  }
  summary_.test_accuracy = double(correct) / eval_count_;
  summary_.test_loss = loss_sum / eval_count_;
  return absl::OkStatus();
}

absl::StatusOr<TrainSummary> Trainer::Summarize() {
  TrainSummary s = summary_;
  AddResourceUse(&s);
  const double params = double(config_.shape.param_count());
  s.steps = steps_done_;
  s.batch = batch_;
  s.samples_per_s = s.train_seconds > 0 ? s.samples / s.train_seconds : 0;
  s.train_flops_per_s = 6.0 * double(config_.shape.ForwardMacsPerSample()) * s.samples_per_s;
  s.dense_bytes = uint64_t(steps_done_) * config_.shape.param_count() * sizeof(float);
  s.compression_ratio = s.wire_bytes ? double(s.dense_bytes) / double(s.wire_bytes) : 0;
  s.update_density = steps_done_ ? double(s.updates_sent) / (double(steps_done_) * params) : 0;
  RECKON_ASSIGN_OR_RETURN(s.weight_hash, backend_->WeightHash());
  if (config_.mode == model::UpdateMode::kThreshold) {
    s.tau = step_now_.tau;
    s.step_quanta = step_now_.step_quanta;
  }
  return s;
}

}  // namespace reckon::worker
