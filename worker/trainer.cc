#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/stop_signals.h"
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
  RECKON_ASSIGN_OR_RETURN(trainer->data_, TrainingData::Load(options, trainer->config_.shape,
                                                             trainer->config_.max_batch));
  trainer->plan_.emplace(options, trainer->data_->shard_size());
  if (options.peers != nullptr) options.peers->DescribeInput(trainer->data_->input());
  if (!options.auto_batch.empty()) {
    trainer->batch_search_ = std::make_unique<BatchSizeSearch>(trainer->options_, trainer->config_,
                                                               *trainer->data_, trainer->log_);
  }
  RECKON_RETURN_IF_ERROR(trainer->MakeReplica());
  if (!options.resume_path.empty()) RECKON_RETURN_IF_ERROR(trainer->Resume());
  return trainer;
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
  if (options_.fault_slow_step_ms > 0) {
    backend_ =
        WithSlowSteps(std::move(backend_), std::chrono::milliseconds(options_.fault_slow_step_ms));
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
  PublisherOptions publishing;
  publishing.node_id = options_.node_id;
  publishing.incarnation = options_.incarnation;
  publishing.param_count = shape.param_count();
  publishing.wire_codec = options_.wire_codec;
  if (options_.peers != nullptr) {
    publishing.sink = [peers = options_.peers](v1::Update message,
                                               const codec::DecodedUpdate& decoded) {
      return peers->Publish(std::move(message), decoded);
    };
  }
  publishing.metrics = options_.metrics;
  publisher_.emplace(std::move(publishing));
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

absl::StatusOr<TrainSummary> Trainer::Run() {
  // Alone, seqs continue the step count, so that a resumed run's messages
  // are the uninterrupted run's, byte for byte; with peers they count this
  // process life's messages (a new incarnation) from 1.
  publisher_->ContinueAfter(options_.peers != nullptr ? 0 : static_cast<uint64_t>(steps_done_));
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
  std::vector<uint32_t> samples(data_->shard().begin(), data_->shard().end());
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
  absl::StatusOr<std::vector<int64_t>> pretrained =
      PretrainLayerwise(p, data_->train(), samples, log_);
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
  // Alone, nothing is numbered or sent (seqs follow the steps, see Run);
  // the replica ends where a cluster's would.
  if (options_.peers == nullptr) return backend_->ApplyDense(emission_.quanta());
  EpochTally sent;
  RECKON_RETURN_IF_ERROR(ApplyAndPublishQuanta(sent));
  summary_.pretrain_start_bytes = sent.wire_bytes;
  return absl::OkStatus();
}

absl::StatusOr<Trainer::EpochTally> Trainer::RunEpoch(int epoch) {
  // The same order on every platform for (seed, epoch).
  data_->OrderFor(epoch);
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
  return plan_->BatchAt(epoch, position, batch_);
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
  const EpochPlan::Position at = plan_->After(published, options_.epochs, batch_);
  const int epoch = at.epoch;
  const size_t position = at.sample;
  first_epoch_ = epoch;
  resume_position_ = position;
  steps_done_ = static_cast<int64_t>(published);
  summary_.epochs = epoch;
  log_ << "reckon-worker: " << published << " steps of shard " << shard
       << " published by its earlier lives: continues at "
       << (epoch < options_.epochs ? absl::StrCat("epoch ", epoch + 1, ", sample ", position,
                                                  " of ", data_->shard_size())
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
    RECKON_RETURN_IF_ERROR(data_->FillBatch(first, batch));
    RECKON_RETURN_IF_ERROR(
        backend_->StageBatch(data_->BatchImages(batch), data_->BatchLabels(batch)));
  }
  RECKON_RETURN_IF_ERROR(backend_->LaunchTrainStep(StepLearningRate(epoch, batch), &emission_));
  StageAhead(epoch, first + size_t(batch));
  return backend_->FinishTrainStep();
}

void Trainer::StageAhead(int epoch, size_t position) {
  const int batch = BatchAt(epoch, position);
  if (batch == 0) return;  // the epoch's last step: the next order is not drawn yet
  // A refusal (a file cut since it was checked, a label outside the
  // classes) stages nothing: the step that trains this batch fills and
  // stages it again and reports it there.
  if (data_->FillBatch(position, batch).ok() &&
      backend_->StageBatch(data_->BatchImages(batch), data_->BatchLabels(batch)).ok()) {
    staged_ = StagedBatch{epoch, position, batch};
  }
}

absl::Status Trainer::SelectBatch(int epoch) {
  RECKON_ASSIGN_OR_RETURN(
      batch_, batch_search_->Choose(epoch, *backend_, step_now_, momentum_now_,
                                    [&](int batch) { return StepLearningRate(epoch, batch); }));
  summary_.batch_choices.push_back(batch_);
  return absl::OkStatus();
}

// A quanta codec's emission (codec/codec.h): the backend encoded it and
// computed its decoded quanta (what every peer decodes from these bytes:
// codec/ tests and fuzzes that contract, and every receiver checks the
// checksum_delta made from them against its own decode), so this numbers
// it, applies the quanta here and sends it, with no decode of its own.
absl::Status Trainer::ApplyAndPublishQuanta(EpochTally& tally) {
  RECKON_ASSIGN_OR_RETURN(
      const Published sent,
      publisher_->PublishQuanta(backend_.get(), emission_.encoded, emission_.dense));
  tally.updates += sent.updates;
  tally.wire_bytes += sent.wire_bytes;
  return absl::OkStatus();
}

absl::Status Trainer::ApplyAndPublish(EpochTally& tally) {
  if (config_.mode == model::UpdateMode::kCodec) return ApplyAndPublishQuanta(tally);
  RECKON_ASSIGN_OR_RETURN(const Published sent,
                          publisher_->PublishThreshold(backend_.get(), emission_.words, step_now_,
                                                       WordsFrom::kLastEmission));
  tally.updates += sent.updates;
  tally.wire_bytes += sent.wire_bytes;
  if (controller_) {
    step_now_ = controller_->Next(step_now_, sent.updates);
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
  const double done_fraction = double(tally.position) / double(data_->shard_size());
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
         << " of " << data_->shard_size() << ", step " << steps_done_ << ")\n";
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
                                                               tally.position, data_->shard_size());
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
        "reckon-worker: %s before the cluster agreed it is done: this replica "
        "(test %.2f%%, weights %s, version vector %s) is not final; a restarted worker re-joins "
        "from a peer\n",
        base::StoppedBySignal(), 100 * summary_.test_accuracy, hash.substr(0, 16),
        summary_.version_vector.dump());
  }
  return absl::OkStatus();
}

absl::Status Trainer::Evaluate() {
  RECKON_ASSIGN_OR_RETURN(const TrainingData::TestResult test, data_->Evaluate(*backend_));
  summary_.test_accuracy = test.accuracy;
  summary_.test_loss = test.loss;
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
