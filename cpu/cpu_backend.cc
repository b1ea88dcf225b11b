#include "cpu/cpu_backend.h"

#include <cblas.h>

#include <atomic>
#include <cmath>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"
#include "codec/codec.h"
#include "codec/quantizer.h"
#include "codec/update_message.h"
#include "codec/update_words.h"
#include "cpu/mlp_math.h"

namespace reckon::cpu {
namespace {

using model::Backend;
using model::BackendConfig;
using model::BatchStats;
using model::Emission;
using model::OptimizerKind;
using model::UpdateMode;

class CpuBackend final : public model::Backend {
 public:
  CpuBackend(const model::BackendConfig& config, codec::FixedPointReplica replica, int threads,
             std::unique_ptr<codec::Codec> codec)
      : config_(config),
        codec_(std::move(codec)),
        replica_(std::move(replica)),
        threads_(threads),
        pool_(threads),
        gemm_rows_([this](size_t n, const std::function<void(size_t, size_t)>& fn) {
          pool_.ParallelFor(n, fn, /*min_chunk=*/8);
        }),
        residual_(config.shape.param_count(), 0.0f),
        state_(config.optimizer.kind == model::OptimizerKind::kSgd ? 0 : config.shape.param_count(),
               0.0f),
        grad_(config.shape.param_count(), 0.0f),
        aggregate_adagrad_(config.optimizer.kind == model::OptimizerKind::kAdagrad &&
                           config.optimizer.adagrad_placement ==
                               model::AdagradPlacement::kAggregate) {
    config_.codec = model::FilledCodecOptions(config);
    if (aggregate_adagrad_) {
      after_own_.resize(config.shape.param_count());
      peer_step_.resize(config.shape.param_count());
    }
    train_ws_.Resize(config_.shape, config_.max_batch);
    eval_ws_.Resize(config_.shape, kEvalChunk);
  }

  std::string Describe() const override {
    return absl::StrCat("cpu (OpenBLAS, ", threads_, " thread", threads_ == 1 ? "" : "s", ")");
  }

  absl::Status LoadWeights(std::span<const int64_t> quanta) override {
    after_own_valid_ = false;  // a snapshot or resume: no "since our last step"
    return replica_.Load(quanta);
  }
  // Host memory: the reads cannot fail.
  absl::StatusOr<std::vector<int64_t>> ReadWeights() const override {
    return std::vector<int64_t>(replica_.quanta().begin(), replica_.quanta().end());
  }
  absl::StatusOr<std::string> WeightHash() const override { return replica_.WeightHash(); }
  absl::StatusOr<uint64_t> Checksum(const codec::WeightChecksum& checksum) const override {
    return checksum.Of(replica_.quanta());
  }
  absl::StatusOr<std::vector<float>> ReadResidual() const override { return residual_; }
  absl::StatusOr<std::vector<float>> ReadOptimizerState() const override { return state_; }
  absl::StatusOr<codec::CodecState> ReadCodecState() const override {
    return codec_ != nullptr ? codec_->State() : codec::CodecState{};
  }
  absl::Status LoadCodecState(const codec::CodecState& state) override {
    return codec_ != nullptr ? codec_->Restore(state) : Backend::LoadCodecState(state);
  }

  absl::Status LoadTrainingState(std::span<const float> residual,
                                 std::span<const float> optimizer_state) override {
    if (residual.size() != residual_.size() || optimizer_state.size() != state_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training state has ", residual.size(), " residual and ", optimizer_state.size(),
          " optimizer values; this model needs ", residual_.size(), " and ", state_.size()));
    }
    residual_.assign(residual.begin(), residual.end());
    state_.assign(optimizer_state.begin(), optimizer_state.end());
    after_own_valid_ = false;
    return absl::OkStatus();
  }

  absl::StatusOr<model::BatchStats> TrainStep(const float* images, const int32_t* labels, int batch,
                                              float learning_rate, model::Emission* out) override {
    if (batch < 1 || batch > config_.max_batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch of ", batch, " outside [1, ", config_.max_batch, "]"));
    }
    RECKON_RETURN_IF_ERROR(model::CheckLabels(std::span<const int32_t>(labels, size_t(batch)),
                                              config_.shape.classes()));
    const model::BatchStats stats =
        ForwardBackward(config_.shape, replica_.weights().data(), images, labels, batch, train_ws_,
                        grad_.data(), &gemm_rows_);
    const bool with_peers = aggregate_adagrad_ && after_own_valid_;
    // The optimizer's rule over residual_[begin, end); returns the largest
    // |residual| there, taken as it writes it.
    auto accumulate = [&](size_t begin, size_t end) {
      const size_t len = end - begin;
      return model::AccumulateDelta(
          config_.optimizer, learning_rate, std::span<const float>(grad_).subspan(begin, len),
          replica_.weights().subspan(begin, len),
          state_.empty() ? std::span<float>() : std::span<float>(state_).subspan(begin, len),
          std::span<float>(residual_).subspan(begin, len),
          with_peers ? std::span<const float>(peer_step_).subspan(begin, len)
                     : std::span<const float>(),
          config_.mode == model::UpdateMode::kThreshold ? model::ResidualBound::kNotTaken
                                                        : model::ResidualBound::kTaken);
    };
    // The dense codec with feedback is encoded in the optimizer's pass, each
    // block as soon as the rule wrote it (codec::DenseFeedbackPass).
    std::optional<codec::DenseFeedbackPass> dense_pass;
    if (config_.mode == model::UpdateMode::kCodec &&
        codec::DenseFeedbackPass::UsableFor(config_.codec)) {
      dense_pass.emplace(config_.codec, residual_, &out->encoded);
    }
    // The residual's largest magnitude, taken as the optimizer writes it:
    // the encoder's check then reads nothing (codec::EncodeWithFeedback).
    std::atomic<uint32_t> residual_bound{0};
    pool_.ParallelFor(grad_.size(), [&](size_t begin, size_t end) {
      if (with_peers) MeasurePeerStep(begin, end);
      if (!dense_pass) {
        codec::RaiseResidualBound(residual_bound, accumulate(begin, end));
        return;
      }
      codec::DenseFeedbackPass::Chunk chunk(*dense_pass, begin);
      for (size_t block = begin; block < end; block += codec::DenseFeedbackPass::kBlockValues) {
        const size_t block_end = std::min(end, block + codec::DenseFeedbackPass::kBlockValues);
        chunk.Encode(block_end - block, accumulate(block, block_end));
      }
    });
    if (config_.mode == model::UpdateMode::kThreshold) {
      out->dense.clear();
      absl::Status s = codec::QuantizeResidual(residual_, config_.step, &out->words);
      if (!s.ok()) return s;
    } else if (dense_pass) {
      out->words.clear();
      RECKON_RETURN_IF_ERROR(dense_pass->Finish(&out->dense, HostThreads()));
    } else {
      out->words.clear();
      absl::Status s =
          codec::EncodeWithFeedback(*codec_, config_.codec, residual_, &out->encoded, &out->dense,
                                    HostThreads(), residual_bound.load(std::memory_order_relaxed));
      if (!s.ok()) return s;
    }
    if (aggregate_adagrad_) RecordAfterOwn(*out);
    return stats;
  }

  void SetThresholdStep(const codec::ThresholdStep& step) override { config_.step = step; }
  void SetMomentum(double momentum) override { config_.optimizer.momentum = momentum; }

  absl::Status ApplyUpdates(int64_t step_quanta, std::span<const uint32_t> words) override {
    // A large message in stripes on the pool (a cache miss an update:
    // stripes overlap more of them); a small one is not worth the wake-up.
    return replica_.Apply(step_quanta, words, codec::FixedPointReplica::Prefetch::kOn,
                          [this](size_t n, const auto& fn) {
                            pool_.ParallelFor(n, fn, /*min_chunk=*/kStripedApplyUpdates);
                          });
  }
  uint64_t WeightsWrapped() const override { return replica_.wrapped(); }
  absl::Status ApplyDense(codec::QuantaSpan quanta) override {
    return replica_.ApplyDense(quanta, HostThreads());
  }
  // The self-check and the apply in one walk (docs/benchmarks.md "The
  // self-check in the apply").
  absl::Status ApplyCheckedDense(const v1::Update& msg) override {
    return codec::CheckAndApplyDenseUpdate(msg, &replica_, HostThreads());
  }
  // The codec's passes in blocks: a helper still waking, or a vCPU the VM
  // stops mid-step, leaves the rest of its share to the other threads.
  codec::ParallelFor HostThreads() override {
    return [this](size_t n, const std::function<void(size_t, size_t)>& fn) {
      pool_.ParallelForBlocks(n, fn);
    };
  }

  absl::StatusOr<model::BatchStats> Evaluate(const float* images, const int32_t* labels,
                                             size_t count) override {
    if (absl::Status s =
            model::CheckLabels(std::span<const int32_t>(labels, count), config_.shape.classes());
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("evaluation: ", s.message()));
    }
    model::BatchStats total;
    const int features = config_.shape.inputs();
    for (size_t begin = 0; begin < count; begin += kEvalChunk) {
      const int n = static_cast<int>(std::min<size_t>(kEvalChunk, count - begin));
      const model::BatchStats s =
          Forward(config_.shape, replica_.weights().data(), images + begin * features,
                  labels + begin, n, eval_ws_, &gemm_rows_);
      total.loss_sum += s.loss_sum;
      total.correct += s.correct;
    }
    return total;
  }

 private:
  static constexpr int kEvalChunk = 1000;
  // Updates a stripe of ApplyUpdates holds at least (8,192: about 80 us of
  // cache misses, well above a wake-up of the pool).
  static constexpr size_t kStripedApplyUpdates = 8192;

  // AdaGrad on the aggregate (model/optimizer.h): the replica as it will be
  // once the caller has applied this step's own emission, so that at the
  // next step replica - after_own_ is exactly what the peers' messages moved.
  void RecordAfterOwn(const model::Emission& own) {
    const int64_t* now = replica_.quanta().data();
    const bool dense = config_.mode != model::UpdateMode::kThreshold;
    const codec::QuantaSpan own_quanta = own.quanta();
    pool_.ParallelFor(after_own_.size(), [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        after_own_[i] = dense ? WrappingSum(now[i], own_quanta[i]) : now[i];
      }
    });
    if (!dense) {
      const int64_t step = config_.step.step_quanta;
      for (const uint32_t word : own.words) {
        int64_t& q = after_own_[codec::UpdateIndex(word)];
        q = WrappingSum(q, codec::UpdateIsNegative(word) ? -step : step);
      }
    }
    after_own_valid_ = true;
  }
  // Overflow is the replica's to report (its apply refuses it); here it
  // must only not be undefined.
  static int64_t WrappingSum(int64_t a, int64_t b) {
    return static_cast<int64_t>(uint64_t(a) + uint64_t(b));
  }
  // peer_step_[begin, end): what the peers moved each weight since our last
  // step, in weight units; run inside the optimizer's pass, chunk by chunk.
  void MeasurePeerStep(size_t begin, size_t end) {
    const double quantum = std::ldexp(1.0, -config_.fraction_bits);
    const int64_t* now = replica_.quanta().data();
    for (size_t i = begin; i < end; ++i) {
      const auto moved = static_cast<int64_t>(uint64_t(now[i]) - uint64_t(after_own_[i]));
      peer_step_[i] = static_cast<float>(double(moved) * quantum);
    }
  }

  model::BackendConfig config_;
  std::unique_ptr<codec::Codec> codec_;  // kCodec only
  codec::FixedPointReplica replica_;
  int threads_;
  // All parallelism is this pool's: GEMMs split by rows, and the
  // elementwise passes. OpenBLAS itself runs single-threaded, because its
  // idle threads spin (sched_yield) between calls and, on 2 vCPUs, halved
  // the speed of everything that ran between the GEMMs (docs/training.md).
  base::ThreadPool pool_;
  RowParallelFor gemm_rows_;
  std::vector<float> residual_;
  std::vector<float> state_;
  std::vector<float> grad_;
  const bool aggregate_adagrad_;
  std::vector<int64_t> after_own_;  // aggregate AdaGrad only (RecordAfterOwn)
  std::vector<float> peer_step_;
  bool after_own_valid_ = false;
  MlpWorkspace<float> train_ws_;
  MlpWorkspace<float> eval_ws_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<model::Backend>> MakeCpuBackend(const model::BackendConfig& config) {
  absl::StatusOr<codec::FixedPointReplica> replica =
      codec::FixedPointReplica::Create(config.shape.param_count(), config.fraction_bits);
  if (!replica.ok()) return replica.status();
  if (config.max_batch < 1) return absl::InvalidArgumentError("batch size must be at least 1");
  if (config.gemm_precision != model::GemmPrecision::kFp32) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gemm-precision ", model::GemmPrecisionName(config.gemm_precision),
                     " runs on the cuda backend only; the cpu backend computes in fp32"));
  }
  const int threads = config.threads > 0
                          ? config.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::unique_ptr<codec::Codec> codec;
  if (config.mode == model::UpdateMode::kCodec) {
    absl::StatusOr<std::unique_ptr<codec::Codec>> made =
        codec::MakeCodec(model::FilledCodecOptions(config));
    if (!made.ok()) return made.status();
    codec = *std::move(made);
  }
  openblas_set_num_threads(1);  // our pool splits the GEMMs (see pool_)
  return std::unique_ptr<model::Backend>(
      new CpuBackend(config, *std::move(replica), threads, std::move(codec)));
}

}  // namespace reckon::cpu
