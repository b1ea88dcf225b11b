#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codec/update_message.h"
#include "worker/checkpoint.h"
#include "worker/fault_backend.h"

namespace reckon::worker {
namespace {

using Clock = std::chrono::steady_clock;

template <typename T>
std::string ToBytes(const std::vector<T>& v) {
  static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
absl::StatusOr<std::vector<T>> FromBytes(const std::string& bytes, size_t count,
                                         const char* what) {
  if (bytes.size() != count * sizeof(T)) {
    return absl::DataLossError(absl::StrCat("checkpoint ", what, " has ", bytes.size(),
                                            " bytes, expected ", count * sizeof(T)));
  }
  std::vector<T> v(count);
  if (count > 0) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

std::string ModeName(UpdateMode mode) {
  return mode == UpdateMode::kDense ? "dense" : "threshold";
}

std::string HumanBytes(double b) {
  if (b >= 1e9) return absl::StrFormat("%.2f GB", b / 1e9);
  if (b >= 1e6) return absl::StrFormat("%.2f MB", b / 1e6);
  if (b >= 1e3) return absl::StrFormat("%.1f kB", b / 1e3);
  return absl::StrFormat("%.0f B", b);
}

// Refuses a checkpoint written under another configuration, naming the field.
absl::Status CheckCompatible(const v1::Checkpoint& c, const TrainerOptions& o) {
  const BackendConfig& b = o.backend_config;
  auto mismatch = [&](const std::string& field, const std::string& theirs,
                      const std::string& ours) {
    return absl::FailedPreconditionError(absl::StrCat("--resume ", o.resume_path, ": ", field,
                                                      " is ", theirs, " in the checkpoint but ",
                                                      ours, " here"));
  };
  if (c.model() != b.shape.ToString()) return mismatch("model", c.model(), b.shape.ToString());
  if (c.fraction_bits() != b.fraction_bits) {
    return mismatch("fraction bits", absl::StrCat(c.fraction_bits()),
                    absl::StrCat(b.fraction_bits));
  }
  if (c.seed() != o.seed) return mismatch("seed", absl::StrCat(c.seed()), absl::StrCat(o.seed));
  if (c.optimizer() != OptimizerName(b.optimizer.kind)) {
    return mismatch("optimizer", c.optimizer(), OptimizerName(b.optimizer.kind));
  }
  if (c.mode() != ModeName(b.mode)) return mismatch("codec mode", c.mode(), ModeName(b.mode));
  if (c.target_density() != o.target_density) {
    return mismatch("target density", absl::StrCat(c.target_density()),
                    absl::StrCat(o.target_density));
  }
  // A fixed tau must match; a steered one continues from where it was.
  if (b.mode == UpdateMode::kThreshold && o.target_density == 0 &&
      c.step_quanta() != b.step.step_quanta) {
    return mismatch("threshold step (quanta)", absl::StrCat(c.step_quanta()),
                    absl::StrCat(b.step.step_quanta));
  }
  return absl::OkStatus();
}

// Steers tau toward a target update density. Emission is bursty (a lowered
// tau releases many residuals at once, then few for a while), so the
// controller acts on a moving average of the density over about 20 steps,
// with a small step in log space each training step. Deterministic (counts
// only), so replicas trained with the same seed stay identical.
class DensityController {
 public:
  DensityController(double target, uint64_t params)
      : target_(target), params_(params), average_(target) {}
  // The next tau; held where the grid cannot represent the change.
  codec::ThresholdStep Next(const codec::ThresholdStep& step, size_t emitted) {
    average_ += kSmoothing * (double(emitted) / double(params_) - average_);
    const double observed = std::max(average_, target_ / 10);
    const double factor = std::clamp(std::exp(kGain * std::log(observed / target_)), 0.5, 2.0);
    absl::StatusOr<codec::ThresholdStep> next =
        codec::MakeThresholdStep(double(step.tau) * factor, step.fraction_bits);
    return next.ok() ? *next : step;
  }
  // Its state, for checkpoints: resuming must continue the same trajectory.
  double average() const { return average_; }
  void set_average(double average) { average_ = average; }

 private:
  static constexpr double kSmoothing = 0.05;
  static constexpr double kGain = 0.05;
  double target_;
  uint64_t params_;
  double average_;
};

}  // namespace

absl::StatusOr<TrainSummary> RunTraining(const TrainerOptions& options, std::ostream& log) {
  const BackendConfig& config = options.backend_config;
  const ModelShape& shape = config.shape;
  if (options.batch < 1 || options.epochs < 0) {
    return absl::InvalidArgumentError("--batch must be >= 1 and --epochs >= 0");
  }

  absl::StatusOr<Dataset> train = LoadIdxDataset(options.data_dir, "train");
  if (!train.ok()) return train.status();
  absl::StatusOr<Dataset> test = LoadIdxDataset(options.data_dir, "t10k");
  if (!test.ok()) return test.status();
  if (train->features() != shape.inputs() || test->features() != shape.inputs()) {
    return absl::InvalidArgumentError(absl::StrCat("the model takes ", shape.inputs(),
                                                   " inputs but the images have ",
                                                   train->features(), " pixels"));
  }
  const PixelStats pixels = ComputePixelStats(*train);
  Standardize(pixels, &*train);
  Standardize(pixels, &*test);
  absl::StatusOr<std::vector<uint32_t>> shard =
      ShardIndices(train->size(), options.shard, options.shards, options.seed);
  if (!shard.ok()) return shard.status();
  if (shard->size() < static_cast<size_t>(options.batch)) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", options.shard, "/", options.shards,
                                                   " has ", shard->size(),
                                                   " samples, fewer than one batch of ",
                                                   options.batch));
  }
  const size_t eval_count = options.eval_samples > 0
                                ? std::min<size_t>(options.eval_samples, test->size())
                                : test->size();

  BackendConfig backend_config = config;
  backend_config.max_batch = options.batch;
  std::string chosen;
  absl::StatusOr<std::unique_ptr<Backend>> made =
      MakeBackend(options.backend, backend_config, &chosen);
  if (!made.ok()) return made.status();
  if (options.fault_corrupt_weight_at_step != 0) {
    *made = WithWeightCorruption(*std::move(made), options.fault_corrupt_weight_at_step, log);
  }
  Backend& backend = **made;
  log << "reckon-worker: backend " << chosen << "\n";

  TrainSummary summary;
  summary.backend = backend.Describe();
  summary.model = shape.ToString();
  summary.params = shape.param_count();
  summary.codec = config.mode == UpdateMode::kDense ? "dense"
                                                    : (options.wire_codec == v1::CODEC_THRESHOLD_RICE
                                                           ? "threshold-rice"
                                                           : "threshold-packed32");
  summary.threshold = config.mode == UpdateMode::kThreshold ? options.threshold : 0;
  summary.tau = config.mode == UpdateMode::kThreshold ? config.step.tau : 0;
  summary.step_quanta = config.mode == UpdateMode::kThreshold ? config.step.step_quanta : 0;

  // Initial replica: from the seed, or from the checkpoint.
  codec::ThresholdStep step_now = config.step;
  std::optional<DensityController> controller;
  if (config.mode == UpdateMode::kThreshold && options.target_density > 0) {
    controller.emplace(options.target_density, shape.param_count());
  }
  int first_epoch = 0;
  int64_t step = 0;
  {
    absl::StatusOr<codec::FixedPointReplica> init =
        codec::FixedPointReplica::Create(shape.param_count(), config.fraction_bits);
    if (!init.ok()) return init.status();
    absl::Status s = InitializeModel(shape, options.seed, &*init);
    if (!s.ok()) return s;
    s = backend.LoadWeights(init->quanta());
    if (!s.ok()) return s;
  }
  if (!options.resume_path.empty()) {
    absl::StatusOr<v1::Checkpoint> c = LoadCheckpoint(options.resume_path);
    if (!c.ok()) return c.status();
    absl::Status s = CheckCompatible(*c, options);
    if (!s.ok()) return s;
    const size_t n = shape.param_count();
    auto weights = FromBytes<int64_t>(c->weights(), n, "weights");
    if (!weights.ok()) return weights.status();
    auto residual = FromBytes<float>(c->residual(), n, "residual");
    if (!residual.ok()) return residual.status();
    const size_t state_n = config.optimizer.kind == OptimizerKind::kSgd ? 0 : n;
    auto state = FromBytes<float>(c->optimizer_state(), state_n, "optimizer state");
    if (!state.ok()) return state.status();
    if ((s = backend.LoadWeights(*weights)); !s.ok()) return s;
    if ((s = backend.LoadTrainingState(*residual, *state)); !s.ok()) return s;
    if (backend.WeightHash() != c->weight_hash()) {
      return absl::DataLossError(absl::StrCat("--resume ", options.resume_path,
                                              ": weights do not match their recorded hash"));
    }
    if (config.mode == UpdateMode::kThreshold && c->step_quanta() != step_now.step_quanta) {
      absl::StatusOr<codec::ThresholdStep> resumed = codec::MakeThresholdStep(
          std::ldexp(double(c->step_quanta()), -config.fraction_bits), config.fraction_bits);
      if (!resumed.ok() || resumed->step_quanta != c->step_quanta()) {
        return absl::DataLossError(absl::StrCat("--resume ", options.resume_path,
                                                ": step of ", c->step_quanta(),
                                                " quanta is not a valid threshold step"));
      }
      step_now = *resumed;
      backend.SetThresholdStep(step_now);
    }
    if (controller) controller->set_average(c->density_average());
    first_epoch = c->epochs_done();
    step = c->steps_done();
    summary.updates_sent = c->updates_sent();
    summary.wire_bytes = c->wire_bytes();
    summary.samples = c->samples_done();
    summary.train_seconds = c->train_seconds();
    log << "reckon-worker: resumed from " << options.resume_path << " at epoch " << first_epoch
        << ", step " << step << "\n";
  }

  const int features = shape.inputs();
  const size_t steps_per_epoch = shard->size() / static_cast<size_t>(options.batch);
  std::vector<float> batch_images(size_t(options.batch) * features);
  std::vector<int32_t> batch_labels(options.batch);
  std::vector<uint32_t> order = *shard;
  Emission emission;
  v1::Update message;
  message.mutable_origin()->set_node_id(options.node_id);
  message.mutable_origin()->set_incarnation(options.incarnation);
  // Seq of our last message. With peers: 1, 2, 3, ... per process life (a new
  // incarnation). Alone: the step count, so a resumed run's messages are the
  // uninterrupted run's, byte for byte.
  uint64_t published = options.peers != nullptr ? 0 : static_cast<uint64_t>(step);
  codec::DecodedUpdate decoded;
  const uint64_t param_bytes = shape.param_count() * sizeof(float);
  bool stop = false;
  // The momentum rule in force (MatchMomentumToCluster), re-matched when the
  // number of workers training changes (a join, a death, one finishing).
  const bool match_momentum = options.peers != nullptr && options.match_momentum_to_cluster &&
                              config.optimizer.kind == OptimizerKind::kMomentum;
  summary.momentum_matched = match_momentum;
  int matched_members = 1;
  double lr_scale = 1;

  for (int epoch = first_epoch; epoch < options.epochs && !stop; ++epoch) {
    // --max-steps reached on the previous epoch's last step: no empty epoch
    // (its log line, its summary and its checkpoint would all be wrong).
    if (options.max_steps > 0 && step >= options.max_steps) break;
    // The same order on every platform for (seed, epoch).
    std::copy(shard->begin(), shard->end(), order.begin());
    SeededShuffle(order, options.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
    double loss_sum = 0;
    uint64_t epoch_samples = 0, epoch_updates = 0, epoch_wire = 0;
    const auto epoch_start = Clock::now();
    auto last_bar = epoch_start;
    for (size_t s = 0; s < steps_per_epoch; ++s) {
      if (options.max_steps > 0 && step >= options.max_steps) {
        stop = true;
        break;
      }
      if (options.stop != nullptr && options.stop->load()) {
        summary.stopped_early = true;
        stop = true;
        break;
      }
      if (options.peers != nullptr) {
        absl::Status s2 = options.peers->BeforeStep(backend, static_cast<uint64_t>(step));
        if (!s2.ok()) return s2;
      }
      if (match_momentum) {
        const int members = std::max(1, options.peers->TrainingMembers());
        if (members != matched_members) {
          const MomentumRule rule = MatchMomentumToCluster(1.0, config.optimizer.momentum, members);
          backend.SetMomentum(rule.momentum);
          lr_scale = rule.learning_rate;
          matched_members = members;
          summary.max_training_members = std::max(summary.max_training_members, members);
          log << absl::StrFormat(
              "reckon-worker: %d workers training: momentum %.4g per own step, learning rate "
              "x%.3g (matched to one worker's momentum %.4g)\n",
              members, rule.momentum, rule.learning_rate, config.optimizer.momentum);
        }
      }
      for (int b = 0; b < options.batch; ++b) {
        const uint32_t idx = order[s * options.batch + b];
        std::memcpy(&batch_images[size_t(b) * features], &train->images[size_t(idx) * features],
                    sizeof(float) * features);
        batch_labels[b] = train->labels[idx];
      }
      const float lr = static_cast<float>(lr_scale * LearningRate(config.optimizer, epoch, step));
      absl::StatusOr<BatchStats> stats = backend.TrainStep(
          batch_images.data(), batch_labels.data(), options.batch, lr, &emission);
      if (!stats.ok()) {
        return absl::Status(stats.status().code(), absl::StrCat("epoch ", epoch + 1, " step ",
                                                                step + 1, ": ",
                                                                stats.status().message()));
      }
      loss_sum += stats->loss_sum;
      epoch_samples += options.batch;
      ++step;
      // The message peers would get, applied here through the same decode and
      // apply path as on every peer.
      absl::Status applied;
      if (config.mode == UpdateMode::kThreshold) {
        message.set_seq(++published);
        absl::Status s2 = codec::EncodeThresholdUpdate(emission.words, step_now.step_quanta,
                                                       shape.param_count(), options.wire_codec,
                                                       &message);
        if (!s2.ok()) return s2;
        if ((s2 = codec::DecodeUpdate(message, &decoded)); !s2.ok()) return s2;
        applied = backend.ApplyUpdates(decoded.step_quanta, decoded.words);
        if (applied.ok() && options.peers != nullptr) {
          applied = options.peers->Publish(message, decoded);
        }
        epoch_updates += decoded.words.size();
        epoch_wire += message.ByteSizeLong();
        if (controller) {
          step_now = controller->Next(step_now, decoded.words.size());
          backend.SetThresholdStep(step_now);
        }
      } else {
        applied = backend.ApplyDense(emission.dense);
        epoch_wire += param_bytes;
      }
      if (!applied.ok()) return applied;
      if (options.progress_bar && Clock::now() - last_bar > std::chrono::milliseconds(200)) {
        last_bar = Clock::now();
        const int width = 30;
        const int done = static_cast<int>(width * (s + 1) / steps_per_epoch);
        log << absl::StrFormat("\r  epoch %d/%d [%s%s] %3d%%  loss %.4f", epoch + 1,
                               options.epochs, std::string(done, '='),
                               std::string(width - done, ' '),
                               static_cast<int>(100 * (s + 1) / steps_per_epoch),
                               loss_sum / epoch_samples)
            << std::flush;
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
    if (options.progress_bar) log << "\r" << std::string(72, ' ') << "\r";
    summary.samples += epoch_samples;
    summary.train_seconds += seconds;
    summary.updates_sent += epoch_updates;
    summary.wire_bytes += epoch_wire;
    summary.train_loss = epoch_samples ? loss_sum / epoch_samples : 0;
    const BatchStats eval =
        backend.Evaluate(test->images.data(), test->labels.data(), eval_count);
    summary.test_accuracy = double(eval.correct) / eval_count;
    summary.test_loss = eval.loss_sum / eval_count;
    summary.epochs = epoch + 1;
    const double dense_epoch = double(epoch_samples / options.batch) * param_bytes;
    log << absl::StrFormat(
               "epoch %d/%d  loss %.4f  test %.2f%%  %.0f samples/s  density %.2e  tau %.3g  "
               "wire %s  dense %s  (%.0fx)",
               epoch + 1, options.epochs, summary.train_loss, 100 * summary.test_accuracy,
               epoch_samples / seconds,
               epoch_samples ? double(epoch_updates) /
                                   (double(epoch_samples / options.batch) * shape.param_count())
                             : 0.0,
               config.mode == UpdateMode::kThreshold ? double(step_now.tau) : 0.0,
               HumanBytes(epoch_wire), HumanBytes(dense_epoch),
               epoch_wire ? dense_epoch / epoch_wire : 0.0)
        << std::endl;
    if (!options.checkpoint_path.empty()) {
      v1::Checkpoint c;
      c.set_format_version(1);
      c.set_model(shape.ToString());
      c.set_fraction_bits(config.fraction_bits);
      c.set_seed(options.seed);
      c.set_optimizer(OptimizerName(config.optimizer.kind));
      c.set_mode(ModeName(config.mode));
      c.set_step_quanta(config.mode == UpdateMode::kThreshold ? step_now.step_quanta : 0);
      c.set_target_density(options.target_density);
      c.set_density_average(controller ? controller->average() : 0);
      // A checkpoint taken at max_steps mid-epoch resumes at the next epoch.
      c.set_epochs_done(epoch + 1);
      c.set_steps_done(step);
      c.set_weights(ToBytes(backend.ReadWeights()));
      c.set_residual(ToBytes(backend.ReadResidual()));
      c.set_optimizer_state(ToBytes(backend.ReadOptimizerState()));
      c.set_updates_sent(summary.updates_sent);
      c.set_wire_bytes(summary.wire_bytes);
      c.set_samples_done(summary.samples);
      c.set_train_seconds(summary.train_seconds);
      c.set_weight_hash(backend.WeightHash());
      absl::Status s = SaveCheckpoint(options.checkpoint_path, c);
      if (!s.ok()) return s;
    }
  }

  if (options.peers != nullptr) {
    // Every replica ends with every update: wait for the cluster, then
    // evaluate the final replica (identical on every worker).
    absl::Status s = options.peers->Finish(backend, static_cast<uint64_t>(step), options.stop);
    if (!s.ok()) return s;
    const BatchStats eval = backend.Evaluate(test->images.data(), test->labels.data(), eval_count);
    summary.test_accuracy = double(eval.correct) / eval_count;
    summary.test_loss = eval.loss_sum / eval_count;
    summary.node_id = options.node_id;
    summary.incarnation = options.incarnation;
    summary.version_vector = options.peers->VersionVectorJson();
    summary.node_counters = options.peers->CountersJson();
    log << absl::StrFormat("cluster quiescent: test %.2f%%  weights %s\n",
                           100 * summary.test_accuracy, backend.WeightHash().substr(0, 16));
  }
  summary.steps = step;
  summary.samples_per_s = summary.train_seconds > 0 ? summary.samples / summary.train_seconds : 0;
  summary.train_flops_per_s = 6.0 * double(shape.ForwardMacsPerSample()) * summary.samples_per_s;
  summary.dense_bytes = uint64_t(step) * param_bytes;
  summary.compression_ratio =
      summary.wire_bytes ? double(summary.dense_bytes) / double(summary.wire_bytes) : 0;
  summary.update_density = step ? double(summary.updates_sent) /
                                      (double(step) * double(shape.param_count()))
                                : 0;
  summary.weight_hash = backend.WeightHash();
  if (config.mode == UpdateMode::kThreshold) {
    summary.tau = step_now.tau;
    summary.step_quanta = step_now.step_quanta;
    summary.target_density = options.target_density;
  }
  return summary;
}

std::string SummaryJson(const TrainSummary& s) {
  return absl::StrFormat(
      "{\"test_accuracy\": %.6f, \"test_loss\": %.6f, \"train_loss\": %.6f, \"epochs\": %d, "
      "\"steps\": %d, \"samples\": %d, \"train_seconds\": %.3f, \"samples_per_s\": %.1f, "
      "\"train_flops_per_s\": %.4g, \"params\": %d, \"model\": \"%s\", \"backend\": \"%s\", "
      "\"codec\": \"%s\", \"threshold\": %.9g, \"tau\": %.9g, \"step_quanta\": %d, "
      "\"target_density\": %.6g, "
      "\"updates_sent\": %d, \"update_density\": %.6g, \"wire_bytes\": %d, "
      "\"dense_bytes\": %d, \"compression_ratio\": %.2f, \"weight_hash\": \"%s\", "
      "\"node_id\": \"%s\", \"incarnation\": %d, \"version_vector\": %s, \"node\": %s, "
      "\"momentum_matched\": %s, \"max_training_members\": %d, \"stopped_early\": %s}\n",
      s.test_accuracy, s.test_loss, s.train_loss, s.epochs, s.steps, s.samples, s.train_seconds,
      s.samples_per_s, s.train_flops_per_s, s.params, s.model, s.backend, s.codec, s.threshold,
      s.tau, s.step_quanta, s.target_density, s.updates_sent, s.update_density, s.wire_bytes, s.dense_bytes,
      s.compression_ratio, s.weight_hash, s.node_id, s.incarnation, s.version_vector,
      s.node_counters, s.momentum_matched ? "true" : "false", s.max_training_members,
      s.stopped_early ? "true" : "false");
}

}  // namespace reckon::worker
