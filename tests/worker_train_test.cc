// The training engine end to end on the real Fashion-MNIST files: model
// layout and initial hash, optimizers, determinism, checkpoint and resume,
// and a short run that must learn.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "codec/fixed_point.h"
#include "cpu/cpu_backend.h"
#include "model/forwarding_backend.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "tests/test_process.h"
#include "worker/checkpoint.h"
#include "worker/dataset.h"
#include "worker/pretrain.h"
#include "worker/trainer.h"

namespace reckon::worker {
namespace {

namespace fs = std::filesystem;

class Training : public ::testing::Test {
 protected:
  // A small, quick configuration on 1/10 of the real training set.
  static TrainerOptions Small(model::UpdateMode mode) {
    TrainerOptions o;
    o.shard = 0;
    o.shards = 10;
    o.epochs = 2;
    o.batch = 50;
    o.eval_samples = 2000;
    o.backend = "cpu";
    o.backend_config.shape = *model::ModelShape::Parse("784,64,10", "relu");
    o.backend_config.optimizer.learning_rate = 0.02;
    // Halving from the start keeps the last evaluation off an oscillation:
    // over seeds 1-5 dense ends at 81.3-83.8% and threshold at 77.3-80.5%.
    o.backend_config.optimizer.schedule = model::Schedule::kHalve;
    o.backend_config.optimizer.halve_after = 0;
    o.backend_config.mode = mode;
    o.threshold = 0.002;
    o.backend_config.step = *codec::MakeThresholdStep(o.threshold, 32);
    return o;
  }
  TrainSummary Run(const TrainerOptions& o) {
    std::ostringstream log;
    absl::StatusOr<TrainSummary> s = RunTraining(o, log);
    EXPECT_TRUE(s.ok()) << s.status() << "\n" << log.str();
    return s.ok() ? *s : TrainSummary{};
  }
  // `o` run for its first `first_epochs`, checkpointed, then resumed from
  // that checkpoint to o.epochs: the resumed run's summary.
  TrainSummary RunInTwoParts(const TrainerOptions& o, int first_epochs) {
    TrainerOptions first = o;
    first.epochs = first_epochs;
    first.checkpoint_path = (dir_ / "ck").string();
    Run(first);
    TrainerOptions second = o;
    second.resume_path = first.checkpoint_path;
    return Run(second);
  }
  ::reckon::testing::ScratchDir dir_;
};

TEST_F(Training, ShortRunsLearnInBothModes) {
  // 2 epochs of 1/10 of Fashion-MNIST (240 steps): far from converged, but a
  // model that learns clears these bounds (about 3 points under the worst of
  // seeds 1-5) and an untrained one (10%) cannot.
  const TrainSummary dense = Run(Small(model::UpdateMode::kCodec));
  EXPECT_GT(dense.test_accuracy, 0.78);
  EXPECT_EQ(dense.steps, 240);
  // Dense fp32 messages are 4 bytes per parameter plus a few header bytes.
  EXPECT_NEAR(dense.compression_ratio, 1.0, 1e-3);
  EXPECT_LT(dense.compression_ratio, 1.0);
  const TrainSummary thr = Run(Small(model::UpdateMode::kThreshold));
  EXPECT_GT(thr.test_accuracy, 0.74);
  EXPECT_GT(thr.updates_sent, 0u);
  EXPECT_GT(thr.compression_ratio, 20.0);
  EXPECT_EQ(thr.dense_bytes, 240u * thr.params * 4);
}

// Five hidden sigmoid layers (the shape of Strom's network) learn from the
// first steps, in both modes: with plain Glorot limits such a network sat
// at chance (10.00%) for two epochs, the sigmoid's slope of 1/4 shrinking
// the gradient layer by layer (model.h InitLimit).
TEST_F(Training, FiveSigmoidLayersLearn) {
  for (model::UpdateMode mode : {model::UpdateMode::kCodec, model::UpdateMode::kThreshold}) {
    TrainerOptions o = Small(mode);
    o.backend_config.shape = *model::ModelShape::Parse("784,128,128,128,128,128,10", "sigmoid");
    const TrainSummary s = Run(o);
    std::printf("FIGURES five sigmoid layers, 240 steps, %s: %.2f%%\n",
                mode == model::UpdateMode::kCodec ? "dense" : "threshold", 100 * s.test_accuracy);
    EXPECT_GT(s.test_accuracy, 0.45);  // chance is 0.10
  }
}

// Strom's network size (five sigmoid layers of 1,800, 14.4M parameters)
// rises from chance in its first 200 steps under the threshold (AdaGrad:
// with momentum it diverges at this width, docs/training.md).
TEST_F(Training, StromSizeSigmoidNetworkRisesUnderTheThreshold) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);
  o.shards = 1;
  o.batch = 100;
  o.epochs = 1;
  o.threshold = 0.01;
  o.backend_config.step = *codec::MakeThresholdStep(o.threshold, 32);
  o.backend_config.shape = *model::ModelShape::Parse("784,1800,1800,1800,1800,1800,10", "sigmoid");
  o.backend_config.optimizer.kind = model::OptimizerKind::kAdagrad;
  o.backend_config.optimizer.learning_rate = 0.01;
  o.max_steps = 20;
  const TrainSummary start = Run(o);
  o.max_steps = 200;
  const TrainSummary later = Run(o);
  std::printf(
      "FIGURES Strom-size sigmoid network (%llu parameters): %.2f%% after 20 steps, "
      "%.2f%% after 200, %.0fx less traffic than dense\n",
      static_cast<unsigned long long>(later.params), 100 * start.test_accuracy,
      100 * later.test_accuracy, later.compression_ratio);
  EXPECT_EQ(later.params, 14'398'210u);
  // 9.70% and 64.15% here (2,000 test images).
  EXPECT_GT(later.test_accuracy, start.test_accuracy + 0.2);
  EXPECT_GT(later.test_accuracy, 0.45);
  EXPECT_GT(later.compression_ratio, 300.0);
}

// --start-workers: the messages after which the others join are the
// starting workers' warm-up steps (each on its own shard's size), plus the
// pre-trained start; never 0 (that would mean "the usual join rules").
TEST(StartWorkers, TheOthersJoinAfterTheStartingWorkersWarmUpSteps) {
  TrainerOptions o;
  o.shards = 4;
  o.batch = 100;
  o.warmup_batch = 25;
  o.warmup_fraction = 1.0 / 6;
  o.start_workers = 2;
  EXPECT_EQ(WarmupMessages(o, 60000), 2u * (15000 / 6 / 25));  // 200
  o.pretrain_samples = 6000;
  EXPECT_EQ(WarmupMessages(o, 60000), 201u);
  o.pretrain_samples = 0;
  o.warmup_batch = 0;  // the warm-up fraction at --batch
  EXPECT_EQ(WarmupMessages(o, 60000), 2u * (2500 / 100));
  o.shards = 3;  // shards of 10 samples: 4, 3, 3
  o.start_workers = 3;
  o.batch = 1;
  o.warmup_fraction = 1;
  EXPECT_EQ(WarmupMessages(o, 10), 10u);
  o.warmup_fraction = 0.01;
  EXPECT_EQ(WarmupMessages(o, 10), 1u);
  // ShardSize is ShardIndices' size.
  for (int shard = 0; shard < 3; ++shard) {
    EXPECT_EQ(ShardSize(10, shard, 3), ShardIndices(10, shard, 3, 1)->size()) << shard;
  }
}

// Supervised layer-wise pre-training, the stages themselves: one hidden
// layer under a fresh output layer, then each further one inserted under a
// fresh output layer, every stage one pass; the last stage is the whole
// model. The same call gives the same replica; no hidden layer, or fewer
// samples than a batch, is an error naming the flag.
TEST(Pretrain, GrowsTheNetworkOneHiddenLayerAtATime) {
  absl::StatusOr<Dataset> train = LoadIdxDataset(kDefaultDataDir, "train");
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<Dataset> test = LoadIdxDataset(kDefaultDataDir, "t10k");
  ASSERT_TRUE(test.ok()) << test.status();
  const PixelStats pixels = ComputePixelStats(*train);
  Standardize(pixels, &*train);
  Standardize(pixels, &*test);
  std::vector<uint32_t> samples(3000);
  for (uint32_t i = 0; i < samples.size(); ++i) samples[i] = i;
  const InMemorySamples train_samples(*train);
  PretrainOptions p;
  p.backend = "cpu";
  p.config.shape = *model::ModelShape::Parse("784,32,32,32,10", "sigmoid");
  p.config.optimizer.kind = model::OptimizerKind::kMomentum;
  p.batch = 25;
  p.learning_rate = 0.1f;
  std::ostringstream log;
  absl::StatusOr<std::vector<int64_t>> weights = PretrainLayerwise(p, train_samples, samples, log);
  ASSERT_TRUE(weights.ok()) << weights.status();
  for (const char* stage : {"stage 1 of 3 (784,32,10/sigmoid): 3000 samples",
                            "stage 2 of 3 (784,32,32,10/sigmoid): 3000 samples",
                            "stage 3 of 3 (784,32,32,32,10/sigmoid): 3000 samples"}) {
    EXPECT_NE(log.str().find(stage), std::string::npos) << log.str();
  }
  const std::vector<int64_t> seed =
      *model::InitialWeights(p.config.shape, p.config.fraction_bits, p.seed);
  ASSERT_EQ(weights->size(), seed.size());
  for (const model::LayerLayout& layer : p.config.shape.layers()) {  // every layer trained
    EXPECT_FALSE(std::equal(seed.begin() + layer.weights, seed.begin() + layer.bias,
                            weights->begin() + layer.weights))
        << layer.weights;
  }
  // A start far above the seed's chance (10%).
  absl::StatusOr<std::unique_ptr<model::Backend>> backend = cpu::MakeCpuBackend(p.config);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_TRUE((*backend)->LoadWeights(*weights).ok());
  const model::BatchStats eval =
      (*backend)->Evaluate(test->images.data(), test->labels.data(), 2000).value();
  std::printf("FIGURES three pre-trained sigmoid layers of 32: %.2f%% on 2,000 test images\n",
              eval.correct / 20.0);
  EXPECT_GT(eval.correct, 2000 * 0.65);
  std::ostringstream again;
  EXPECT_EQ(*PretrainLayerwise(p, train_samples, samples, again), *weights);

  // SIGTERM while pre-training: it stops within a step, not after the
  // stages (minutes at Strom's size), and says so.
  std::atomic<bool> stop{true};
  PretrainOptions stopped = p;
  stopped.stop = &stop;
  EXPECT_EQ(PretrainLayerwise(stopped, train_samples, samples, again).status().message(),
            "pre-training stage 1 (784,32,10/sigmoid): stopped by a signal after 0 of 120 steps");

  PretrainOptions flat = p;
  flat.config.shape = *model::ModelShape::Parse("784,10", "sigmoid");
  EXPECT_EQ(PretrainLayerwise(flat, train_samples, samples, again).status().message(),
            "--pretrain-samples: the model 784,10/sigmoid has no hidden layer to pre-train");
  EXPECT_EQ(
      PretrainLayerwise(p, train_samples, std::span(samples).first(24), again).status().message(),
      "--pretrain-samples: 24 samples are less than a batch of 25");
}

// The trainer pre-trains before its first step and starts from the result:
// higher after two epochs than from the seed's weights, and a resume does
// not pre-train again (the checkpoint holds the pre-trained start).
TEST_F(Training, PretrainedStartIsTrainedOnAndNotRepeatedOnResume) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);
  o.backend_config.shape = *model::ModelShape::Parse("784,64,64,64,10", "sigmoid");
  o.backend_config.optimizer.kind = model::OptimizerKind::kMomentum;
  o.backend_config.optimizer.learning_rate = 0.1;
  o.threshold = 0.01;
  o.backend_config.step = *codec::MakeThresholdStep(o.threshold, 32);
  const TrainSummary plain = Run(o);
  o.pretrain_samples = 3000;
  o.warmup_batch = 25;
  TrainerOptions start_only = o;
  start_only.epochs = 0;
  const TrainSummary start = Run(start_only);
  const TrainSummary pretrained = Run(o);
  std::printf(
      "FIGURES three sigmoid layers of 64, 2 epochs: %.2f%% from the seed, %.2f%% from "
      "the pre-trained start (%.2f%% before the first step, %.2f s)\n",
      100 * plain.test_accuracy, 100 * pretrained.test_accuracy, 100 * start.test_accuracy,
      start.pretrain_seconds);
  EXPECT_TRUE(start.pretrained);
  EXPECT_EQ(start.steps, 0);
  EXPECT_GT(start.test_accuracy, 0.65);
  EXPECT_FALSE(plain.pretrained);
  EXPECT_GT(pretrained.test_accuracy, plain.test_accuracy);
  EXPECT_EQ(pretrained.pretrain_start_bytes, 0u) << "alone, nothing is sent";
  const TrainSummary resumed = RunInTwoParts(o, 1);
  EXPECT_FALSE(resumed.pretrained);
  EXPECT_EQ(resumed.weight_hash, pretrained.weight_hash);
  o.pretrain_samples = 6001;
  std::ostringstream log;
  EXPECT_EQ(RunTraining(o, log).status().message(),
            "--pretrain-samples 6001: shard 0/10 has 6000 samples (give 0 to 6000)");
}

// Strom's first-epoch ramp: the first half of the first epoch (6,000
// samples a shard) in minibatches of 10, then 50: 300 + 60 steps, then 120
// in the second epoch, which a resume from the first epoch's checkpoint
// repeats exactly (the ramp is the first epoch's only).
TEST_F(Training, WarmupBatchRampsTheFirstEpochOnly) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);
  const TrainSummary plain = Run(o);
  o.warmup_batch = 10;
  o.warmup_fraction = 0.5;
  const TrainSummary ramp = Run(o);
  EXPECT_EQ(ramp.steps, 300 + 60 + 120);
  EXPECT_EQ(ramp.samples, 2u * 6000);
  EXPECT_EQ(ramp.dense_bytes, 480u * ramp.params * 4);
  EXPECT_NE(ramp.weight_hash, plain.weight_hash);
  EXPECT_GT(ramp.test_accuracy, 0.60);  // learns (chance: 0.10)
  EXPECT_EQ(RunInTwoParts(o, 1).weight_hash, ramp.weight_hash);
  o.warmup_fraction = 0;
  std::ostringstream log;
  const absl::StatusOr<TrainSummary> bad = RunTraining(o, log);
  EXPECT_EQ(bad.status().message(), "--warmup-batch must be >= 0 and --warmup-fraction in (0, 1]");
}

// A device read that fails (a CUDA error) ends the run with the error: the
// evaluation used to become "0 correct, loss NaN" with a line on stderr,
// and a checkpoint would have been written from zeros.
class FailingReads final : public model::ForwardingBackend {
 public:
  FailingReads(std::unique_ptr<model::Backend> real, bool evaluate_fails)
      : ForwardingBackend(std::move(real)), evaluate_fails_(evaluate_fails) {}
  absl::StatusOr<std::vector<int64_t>> ReadWeights() const override { return Lost(); }
  absl::StatusOr<std::string> WeightHash() const override { return Lost(); }
  absl::StatusOr<std::vector<float>> ReadResidual() const override { return Lost(); }
  absl::StatusOr<std::vector<float>> ReadOptimizerState() const override { return Lost(); }
  absl::StatusOr<model::BatchStats> Evaluate(const float* images, const int32_t* labels,
                                             size_t count) override {
    if (evaluate_fails_) return Lost();
    return real().Evaluate(images, labels, count);
  }

 private:
  static absl::Status Lost() { return absl::InternalError("cudaErrorLaunchFailure: device lost"); }
  const bool evaluate_fails_;
};

TEST_F(Training, ADeviceThatCannotBeReadEndsTheRunWithItsError) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);
  o.epochs = 1;
  o.max_steps = 10;
  o.wrap_backend = [](std::unique_ptr<model::Backend> real) {
    return std::make_unique<FailingReads>(std::move(real), /*evaluate_fails=*/true);
  };
  std::ostringstream log;
  absl::StatusOr<TrainSummary> s = RunTraining(o, log);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInternal) << s.status();
  EXPECT_NE(s.status().message().find("device lost"), std::string::npos) << s.status();
  // Evaluation works, the checkpoint's reads do not: no checkpoint.
  const std::string path = ::testing::TempDir() + "/unreadable.ckpt";
  std::remove(path.c_str());
  o.checkpoint_path = path;
  o.wrap_backend = [](std::unique_ptr<model::Backend> real) {
    return std::make_unique<FailingReads>(std::move(real), /*evaluate_fails=*/false);
  };
  s = RunTraining(o, log);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInternal) << s.status();
  EXPECT_FALSE(std::ifstream(path).good()) << "a checkpoint was written from unread weights";
}

// Records the step-in-halves calls the trainer makes ('S'tage, 'L'aunch,
// 'F'inish) and passes them on to the real backend; refuses the
// `refuse_stage`-th StageBatch (0: none) as a backend refuses a bad batch.
class RecordsHalves final : public model::ForwardingBackend {
 public:
  RecordsHalves(std::unique_ptr<model::Backend> real, std::string* calls, int refuse_stage)
      : ForwardingBackend(std::move(real)), calls_(calls), refuse_stage_(refuse_stage) {}
  absl::Status StageBatch(std::span<const float> images, std::span<const int32_t> labels) override {
    calls_->push_back('S');
    if (++stages_ == refuse_stage_) {
      calls_->push_back('!');
      return absl::InvalidArgumentError("refused by the test");
    }
    return real().StageBatch(images, labels);
  }
  absl::Status LaunchTrainStep(float learning_rate, model::Emission* out) override {
    calls_->push_back('L');
    return real().LaunchTrainStep(learning_rate, out);
  }
  absl::StatusOr<model::BatchStats> FinishTrainStep() override {
    calls_->push_back('F');
    return real().FinishTrainStep();
  }

 private:
  std::string* calls_;
  const int refuse_stage_;
  int stages_ = 0;
};

// The trainer takes each step in halves and stages the next batch of the
// epoch while the step computes (issue 37 item 4: on the CUDA backend the
// batch's copy overlaps the compute): one StageBatch a step, between the
// launch and the finish, none after an epoch's last step (the next epoch's
// order is drawn later). A refused stage ahead costs nothing: the step
// that trains that batch stages it again. Both runs end where a run of
// whole TrainSteps ends (the wrapper's defaults), bit for bit.
TEST_F(Training, TheNextBatchIsStagedWhileAStepComputes) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);  // 120 steps an epoch, 2 epochs
  o.wrap_backend = [](std::unique_ptr<model::Backend> real) {
    return std::make_unique<model::ForwardingBackend>(std::move(real));
  };
  const TrainSummary whole_steps = Run(o);
  std::string calls;
  o.wrap_backend = [&calls](std::unique_ptr<model::Backend> real) {
    return std::make_unique<RecordsHalves>(std::move(real), &calls, 0);
  };
  EXPECT_EQ(Run(o).weight_hash, whole_steps.weight_hash);
  std::string epoch = "S";
  for (int step = 1; step < 120; ++step) epoch += "LSF";
  epoch += "LF";
  EXPECT_EQ(calls, epoch + epoch);

  calls.clear();
  o.wrap_backend = [&calls](std::unique_ptr<model::Backend> real) {
    return std::make_unique<RecordsHalves>(std::move(real), &calls, 11);  // during step 10
  };
  EXPECT_EQ(Run(o).weight_hash, whole_steps.weight_hash);
  std::string refused = "S";
  for (int step = 1; step < 120; ++step)
    refused += step == 10 ? "LS!F" : step == 11 ? "SLSF" : "LSF";
  refused += "LF";
  EXPECT_EQ(calls, refused + epoch);
}

TEST_F(Training, DensityControllerHoldsTheTarget) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);
  o.target_density = 4e-3;
  o.threshold = 0.01;  // a start in the right region: 240 steps are not all transient
  o.backend_config.step = *codec::MakeThresholdStep(o.threshold, 32);
  const TrainSummary s = Run(o);
  EXPECT_GT(s.update_density, 0.8 * o.target_density) << s.update_density;
  EXPECT_LT(s.update_density, 1.25 * o.target_density) << s.update_density;
  EXPECT_NE(s.tau, static_cast<float>(o.threshold)) << "the controller should have moved tau";
  // Resuming a steered run continues from the steered tau, exactly.
  EXPECT_EQ(RunInTwoParts(o, 1).weight_hash, s.weight_hash);
}

TEST_F(Training, SameSeedSameHashOtherSeedOtherHash) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);
  o.max_steps = 40;
  const std::string a = Run(o).weight_hash;
  EXPECT_EQ(Run(o).weight_hash, a);
  o.seed = 2;
  EXPECT_NE(Run(o).weight_hash, a);
}

// The slow-device fault (--fault-slow-step-ms) is a floor under each step's
// time and nothing else: N steps take at least (N - 1) floors (a sleep's
// lower bound, whatever the machine) and end on the same replica.
TEST_F(Training, ASlowStepFaultPutsAFloorUnderEveryStepAndChangesNothingElse) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);
  o.max_steps = 20;
  const std::string plain = Run(o).weight_hash;
  o.fault_slow_step_ms = 30;
  const auto start = std::chrono::steady_clock::now();
  const TrainSummary slow = Run(o);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(slow.steps, 20);
  EXPECT_EQ(slow.weight_hash, plain);
  EXPECT_GE(took, std::chrono::milliseconds(19 * 30));
}

TEST_F(Training, ResumeFromACheckpointEqualsAnUninterruptedRun) {
  for (const model::UpdateMode mode : {model::UpdateMode::kThreshold, model::UpdateMode::kCodec}) {
    const TrainSummary full = Run(Small(mode));
    const TrainSummary resumed = RunInTwoParts(Small(mode), 1);
    EXPECT_EQ(resumed.weight_hash, full.weight_hash) << "mode " << int(mode);
    EXPECT_EQ(resumed.steps, full.steps);
    EXPECT_EQ(resumed.wire_bytes, full.wire_bytes);
  }
}

// Dyntree8 recomputes its scales every --absmax-every steps and uses them
// in between: a run resumed between two rescales goes on with the scales
// the uninterrupted run had (the checkpoint keeps them and the codec's
// step count), not with fresh ones. 120 steps an epoch, a rescale every 7.
TEST_F(Training, DyntreeResumedBetweenRescalesEqualsAnUninterruptedRun) {
  TrainerOptions o = Small(model::UpdateMode::kCodec);
  o.backend_config.codec.codec = v1::CODEC_DYNTREE8;
  o.backend_config.codec.absmax_every = 7;
  const TrainSummary full = Run(o);
  const TrainSummary resumed = RunInTwoParts(o, 1);
  EXPECT_EQ(resumed.weight_hash, full.weight_hash);
  EXPECT_EQ(resumed.wire_bytes, full.wire_bytes);
}

// Sets a stop flag (as SIGTERM does) during the N-th training step of any
// backend the run makes: its own, an auto-batch trial's, a pre-training
// stage's. The counter is shared by all of them, so N picks a place in
// the run's sequence of steps.
class StopAtStep final : public model::ForwardingBackend {
 public:
  StopAtStep(std::unique_ptr<model::Backend> real, int64_t* steps, int64_t stop_at,
             std::atomic<bool>* stop)
      : ForwardingBackend(std::move(real)), steps_(steps), stop_at_(stop_at), stop_(stop) {}
  absl::StatusOr<model::BatchStats> TrainStep(const float* images, const int32_t* labels, int batch,
                                              float lr, model::Emission* out) override {
    if (++*steps_ == stop_at_) stop_->store(true);
    return real().TrainStep(images, labels, batch, lr, out);
  }

 private:
  int64_t* steps_;
  const int64_t stop_at_;
  std::atomic<bool>* stop_;
};

// A run stopped (the stop flag, as SIGTERM sets it) at any step and resumed
// from the checkpoint it wrote on the way out ends where the run never
// stopped does, bit for bit: stopped inside pre-training, an auto-batch
// trial, the first epoch's warm-up ramp, the middle of an epoch and its
// last step, each resumed from the previous one's checkpoint. (The stopped
// epoch used to be recorded as done: the rest of it was never trained.)
TEST_F(Training, StoppedAnywhereAndResumedEndsAsTheUninterruptedRun) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);  // 6000 samples a shard, --batch 50
  o.backend_config.optimizer.kind = model::OptimizerKind::kMomentum;
  o.backend_config.optimizer.momentum = 0.9;
  o.target_density = 4e-3;   // the density controller's state, too
  o.pretrain_samples = 500;  // 50 steps of 10
  o.warmup_batch = 10;       // the first 1000 samples of epoch 1: 100 steps of 10
  o.auto_batch = {25, 50, 100};
  o.auto_batch_samples = 500;  // 20 + 10 + 5 trial steps at every epoch's start
  o.auto_batch_eval = 500;
  std::ostringstream full_log;
  absl::StatusOr<TrainSummary> full = RunTraining(o, full_log);
  ASSERT_TRUE(full.ok()) << full.status();

  // Training steps of any backend, counted from each part's start: a part
  // resumed inside an epoch neither pre-trains nor tries batch sizes.
  const int64_t pretrain = 50, trials = 35;
  const int64_t after_ramp = 5000 / full->batch_choices[0];  // epoch 1's steps after the ramp
  const int64_t stops[] = {
      30,              // inside pre-training: resumes at the start, pre-trains again
      pretrain + 12,   // inside epoch 1's first trial, the pre-trained start applied
      trials + 40,     // inside the ramp (step 40 of 100)
      60 + 7,          // the ramp's other 60 steps, then mid-epoch
      after_ramp - 7,  // during the epoch's last step: epoch 2 starts afresh
      12,              // inside epoch 2's first trial
      trials + 10,     // mid-epoch 2
  };
  const std::string checkpoint = (dir_ / "ck").string();
  for (size_t part = 0; part <= std::size(stops); ++part) {
    TrainerOptions p = o;
    p.checkpoint_path = checkpoint;
    if (part > 0) p.resume_path = checkpoint;
    std::atomic<bool> stop{false};
    int64_t steps = 0;
    const int64_t stop_at = part < std::size(stops) ? stops[part] : 0;
    p.stop = &stop;
    p.wrap_backend = [&](std::unique_ptr<model::Backend> real) {
      return std::make_unique<StopAtStep>(std::move(real), &steps, stop_at, &stop);
    };
    std::ostringstream log;
    absl::StatusOr<TrainSummary> s = RunTraining(p, log);
    ASSERT_TRUE(s.ok()) << "part " << part << ": " << s.status() << "\n" << log.str();
    SCOPED_TRACE(absl::StrCat("part ", part, " stopped at step ", stop_at, "\n", log.str()));
    if (part < std::size(stops)) {
      EXPECT_TRUE(s->stopped_early);
      EXPECT_NE(log.str().find(part == 4 ? "stopped before epoch 2 (sample 0 of 6000"
                                         : "--resume continues there"),
                std::string::npos);
    }
    if (part == 1) {
      EXPECT_NE(log.str().find("stopped by a signal while trying batch size 25"),
                std::string::npos);
    }
    if (part == std::size(stops)) {
      EXPECT_FALSE(s->stopped_early);
      EXPECT_EQ(s->weight_hash, full->weight_hash);
      EXPECT_EQ(s->steps, full->steps);
      EXPECT_EQ(s->samples, full->samples);
      EXPECT_EQ(s->updates_sent, full->updates_sent);
      EXPECT_EQ(s->wire_bytes, full->wire_bytes);
      EXPECT_EQ(s->epochs, full->epochs);
    }
  }
}

// --max-steps ending exactly on an epoch boundary ends that epoch: no empty
// extra epoch in the log or the summary, and a resume from its checkpoint
// goes on with the next epoch's data, not the one after.
TEST_F(Training, MaxStepsOnAnEpochBoundaryEndsThatEpoch) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);
  o.epochs = 3;
  const int64_t per_epoch = 6000 / o.batch;  // shard 0 of 10
  TrainerOptions first = o;
  first.max_steps = per_epoch;
  first.checkpoint_path = (dir_ / "ck").string();
  std::ostringstream log;
  absl::StatusOr<TrainSummary> s = RunTraining(first, log);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->epochs, 1) << log.str();
  EXPECT_EQ(s->steps, per_epoch);
  EXPECT_GT(s->train_loss, 0) << log.str();
  EXPECT_EQ(log.str().find("epoch 2/3"), std::string::npos) << log.str();

  TrainerOptions straight = o;
  straight.max_steps = 2 * per_epoch;
  const TrainSummary full = Run(straight);
  TrainerOptions second = straight;
  second.resume_path = first.checkpoint_path;
  const TrainSummary resumed = Run(second);
  EXPECT_EQ(resumed.weight_hash, full.weight_hash);
  EXPECT_EQ(resumed.epochs, 2);
}

TEST_F(Training, CorruptOrForeignCheckpointsAreRefused) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);
  o.epochs = 1;
  o.max_steps = 5;
  o.checkpoint_path = (dir_ / "ck").string();
  Run(o);
  std::string bytes;
  {
    std::ifstream in(o.checkpoint_path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_TRUE(LoadCheckpoint(o.checkpoint_path).ok());
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x01;
  std::ofstream((dir_ / "bad").string(), std::ios::binary) << flipped;
  absl::StatusOr<StoredCheckpoint> bad = LoadCheckpoint((dir_ / "bad").string());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("checksum mismatch"), std::string::npos);
  std::ofstream((dir_ / "short").string(), std::ios::binary) << bytes.substr(0, bytes.size() - 9);
  EXPECT_EQ(LoadCheckpoint((dir_ / "short").string()).status().code(), absl::StatusCode::kDataLoss);

  TrainerOptions other = Small(model::UpdateMode::kThreshold);
  other.resume_path = (dir_ / "bad").string();
  std::ostringstream log;
  EXPECT_EQ(RunTraining(other, log).status().code(), absl::StatusCode::kDataLoss);
  other.resume_path = o.checkpoint_path;
  other.backend_config.shape = *model::ModelShape::Parse("784,32,10", "relu");
  absl::StatusOr<TrainSummary> s = RunTraining(other, log);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("model is 784,64,10/relu"), std::string::npos) << s.status();
}

// Automatic minibatch-size selection (Seide 2014 section 4): at the start of
// each epoch every candidate trains a copy of the model on the next samples,
// and the largest within the tolerance of the best training accuracy is
// kept. The trials touch nothing of the run itself: one candidate equal to
// --batch trains exactly the run without auto batch, and a run resumed from
// a checkpoint chooses and ends as the uninterrupted one.
TEST_F(Training, AutoBatchChoosesPerEpochWithoutTouchingTheRun) {
  const std::vector<int> candidates = {25, 50, 100, 200};
  TrainerOptions o = Small(model::UpdateMode::kThreshold);  // --batch 50, 6000 samples a shard
  o.epochs = 3;
  o.auto_batch = candidates;
  o.auto_batch_samples = 1000;
  o.auto_batch_eval = 1000;
  std::ostringstream log;
  absl::StatusOr<TrainSummary> full = RunTraining(o, log);
  ASSERT_TRUE(full.ok()) << full.status();
  ASSERT_EQ(full->batch_choices.size(), 3u) << log.str();
  int64_t steps = 0;
  for (const int chosen : full->batch_choices) {
    EXPECT_NE(std::find(candidates.begin(), candidates.end(), chosen), candidates.end());
    steps += 6000 / chosen;
  }
  EXPECT_EQ(full->steps, steps);
  EXPECT_EQ(full->batch, full->batch_choices.back());
  EXPECT_GT(full->test_accuracy, 0.74) << log.str();
  EXPECT_NE(log.str().find("epoch 1 batch by accuracy on 1000 training samples after 1000: 25 "),
            std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("% 200 "), std::string::npos) << log.str();

  const TrainSummary resumed = RunInTwoParts(o, 2);
  EXPECT_EQ(resumed.weight_hash, full->weight_hash);
  EXPECT_EQ(resumed.batch_choices, std::vector<int>{full->batch_choices[2]});

  // Any loss allowed: always the largest. One candidate, --batch itself: the
  // run without auto batch, bit for bit.
  TrainerOptions loose = o;
  loose.auto_batch_tolerance = 1.0;
  const TrainSummary largest = Run(loose);
  EXPECT_EQ(largest.batch_choices, (std::vector<int>{200, 200, 200}));
  // The rate per step is kept by default; a power of 1 keeps it per sample
  // (x4 at 200 against --batch 50): another run.
  loose.auto_batch_lr_power = 1;
  EXPECT_NE(Run(loose).weight_hash, largest.weight_hash);
  TrainerOptions one = o;
  one.auto_batch = {50};
  TrainerOptions none = o;
  none.auto_batch.clear();
  EXPECT_EQ(Run(one).weight_hash, Run(none).weight_hash);
}

TEST_F(Training, AutoBatchRefusesWhatCannotBeTried) {
  TrainerOptions o = Small(model::UpdateMode::kThreshold);
  std::ostringstream log;
  o.auto_batch = {100, 50};
  EXPECT_NE(RunTraining(o, log).status().message().find("strictly ascending"), std::string::npos);
  o.auto_batch = {50, 100};
  o.auto_batch_samples = 99;
  EXPECT_NE(RunTraining(o, log).status().message().find("at least the largest candidate (100)"),
            std::string::npos);
  o.auto_batch_samples = 1000;
  o.auto_batch_every = 0;
  EXPECT_EQ(RunTraining(o, log).status().message(), "--auto-batch-every must be >= 1");
  o.auto_batch_every = 1;
  o.auto_batch_lr_power = 2;
  EXPECT_EQ(RunTraining(o, log).status().message(), "--auto-batch-lr-power must be in [0, 1]");
  o.auto_batch_lr_power = 0;
  o.auto_batch_samples = 7000;
  EXPECT_NE(RunTraining(o, log).status().message().find("has only 6000 samples"),
            std::string::npos);
}

TEST_F(Training, MissingDataNamesThePlace) {
  TrainerOptions o = Small(model::UpdateMode::kCodec);
  o.data_dir = (dir_ / "no-such-dir").string();
  std::ostringstream log;
  absl::StatusOr<TrainSummary> s = RunTraining(o, log);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("no-such-dir"), std::string::npos);
}

}  // namespace
}  // namespace reckon::worker
