// The CUDA backend (model/backend.h): the replica, residual, optimizer
// state and every scratch buffer in device memory; cuBLAS for the GEMMs,
// cuda/kernels.cu for the rest, cuda/threshold_pass.cu for Strom's pass.
// One compute stream and one copy stream: a staged batch crosses PCIe on
// the copy stream into the other of two input buffers while the step
// before computes (StageBatch; events order the two). All allocation
// happens in Create (and when a larger evaluation or apply batch than any
// before arrives). Only the batch goes in, and only the emitted words (or
// dense quanta), the per-row loss and hits, and what the caller asks to
// read come out.
// The MLP's passes themselves are cuda/device_mlp.h's.
#include "cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstring>
#include <numeric>
#include <optional>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/update_words.h"
#include "cuda/cublas_api.h"
#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "cuda/device_codec.h"
#include "cuda/device_elementwise.h"
#include "cuda/device_mlp.h"
#include "cuda/device_replica.h"
#include "cuda/kernels.h"
#include "cuda/threshold_pass.h"

namespace reckon::cuda {
namespace {

using model::BackendConfig;
using model::BatchStats;
using model::Emission;
using model::OptimizerKind;
using model::UpdateMode;

class CudaBackend final : public model::Backend {
 public:
  explicit CudaBackend(const BackendConfig& config, const DeviceInfo& device)
      : config_(config),
        device_(device),
        aggregate_adagrad_(config.optimizer.kind == OptimizerKind::kAdagrad &&
                           config.optimizer.adagrad_placement ==
                               model::AdagradPlacement::kAggregate) {
    config_.codec = model::FilledCodecOptions(config);
  }

  ~CudaBackend() override {
    pass_.reset();
    if (cublas_ != nullptr) blas_->destroy(cublas_);
    if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    RECKON_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_.ordinal));
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    absl::StatusOr<const CublasApi*> blas = Cublas();
    if (!blas.ok()) return blas.status();
    blas_ = *blas;
    RECKON_CUBLAS_RETURN_IF_ERROR(blas_->create(&cublas_));
    RECKON_CUBLAS_RETURN_IF_ERROR(blas_->set_stream(cublas_, stream_));
    // fp32 (the default): plain fp32 GEMMs, no TF32, so the CPU twin bounds
    // the difference. tf32: the tensor cores, asked for explicitly.
    RECKON_CUBLAS_RETURN_IF_ERROR(blas_->set_math_mode(
        cublas_, config_.gemm_precision == model::GemmPrecision::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                       : CUBLAS_PEDANTIC_MATH));
    const size_t n = config_.shape.param_count();
    RECKON_ASSIGN_OR_RETURN(replica_, DeviceReplica::Create(n, config_.fraction_bits, stream_));
    RECKON_RETURN_IF_ERROR(residual_.Resize(n));
    RECKON_RETURN_IF_ERROR(grad_.Resize(n));
    if (config_.optimizer.kind != OptimizerKind::kSgd) {
      RECKON_RETURN_IF_ERROR(state_.Resize(n));
    }
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(residual_.get(), 0, n * sizeof(float), stream_));
    if (state_.get() != nullptr) {
      RECKON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(state_.get(), 0, n * sizeof(float), stream_));
    }
    if (aggregate_adagrad_) RECKON_RETURN_IF_ERROR(after_own_.Resize(n));
    if (config_.mode == UpdateMode::kThreshold) {
      absl::StatusOr<std::unique_ptr<ThresholdPass>> pass =
          ThresholdPass::Create(n, CompactionMethod::kSinglePass, stream_);
      if (!pass.ok()) return pass.status();
      pass_ = *std::move(pass);
    } else {
      absl::StatusOr<std::unique_ptr<codec::Codec>> codec = codec::MakeCodec(config_.codec);
      if (!codec.ok()) return codec.status();
      codec_ = *std::move(codec);
      if (HasDeviceCodec(config_.codec)) {
        absl::StatusOr<std::unique_ptr<DeviceCodec>> on_device =
            MakeDeviceCodec(config_.codec, stream_);
        if (!on_device.ok()) return on_device.status();
        device_codec_ = *std::move(on_device);
      } else {
        RECKON_RETURN_IF_ERROR(h_residual_.Resize(n));
      }
    }
    mlp_.emplace(config_.shape, blas_, cublas_, stream_);
    RECKON_RETURN_IF_ERROR(mlp_->Resize(config_.max_batch, &train_));
    for (Input& input : inputs_)
      RECKON_RETURN_IF_ERROR(input.Resize(config_.max_batch, features()));
    return Sync();
  }

  std::string Describe() const override {
    return absl::StrCat("cuda (", device_.name, ", sm_", device_.compute_major,
                        device_.compute_minor, ", cuBLAS",
                        config_.gemm_precision == model::GemmPrecision::kTf32 ? " tf32" : "", ")");
  }

  absl::Status LoadWeights(std::span<const int64_t> quanta) override {
    after_own_valid_ = false;  // a snapshot or resume: no "since our last step"
    return replica_->Load(quanta);
  }
  absl::StatusOr<std::vector<int64_t>> ReadWeights() const override { return replica_->Read(); }
  absl::StatusOr<std::string> WeightHash() const override { return replica_->Hash(); }
  uint64_t WeightsWrapped() const override { return replica_->wrapped(); }
  absl::StatusOr<std::vector<float>> ReadResidual() const override {
    std::vector<float> out(config_.shape.param_count());
    RECKON_RETURN_IF_ERROR(
        CopyOut(residual_.get(), out.data(), out.size() * sizeof(float), "the residual"));
    return out;
  }
  absl::StatusOr<std::vector<float>> ReadOptimizerState() const override {
    std::vector<float> out(state_.get() == nullptr ? 0 : config_.shape.param_count());
    if (!out.empty()) {
      RECKON_RETURN_IF_ERROR(
          CopyOut(state_.get(), out.data(), out.size() * sizeof(float), "the optimizer state"));
    }
    return out;
  }

  absl::StatusOr<codec::CodecState> ReadCodecState() const override {
    if (device_codec_ != nullptr) return device_codec_->State();
    return codec_ != nullptr ? codec_->State() : codec::CodecState{};
  }
  absl::Status LoadCodecState(const codec::CodecState& state) override {
    if (device_codec_ != nullptr) return device_codec_->Restore(state);
    return codec_ != nullptr ? codec_->Restore(state) : Backend::LoadCodecState(state);
  }

  absl::Status LoadTrainingState(std::span<const float> residual,
                                 std::span<const float> optimizer_state) override {
    const size_t n = config_.shape.param_count();
    const size_t state_n = state_.get() == nullptr ? 0 : n;
    if (residual.size() != n || optimizer_state.size() != state_n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training state has ", residual.size(), " residual and ", optimizer_state.size(),
          " optimizer values; this model needs ", n, " and ", state_n));
    }
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        residual_.get(), residual.data(), residual.size_bytes(), cudaMemcpyHostToDevice, stream_));
    if (state_n > 0) {
      RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(state_.get(), optimizer_state.data(),
                                                  optimizer_state.size_bytes(),
                                                  cudaMemcpyHostToDevice, stream_));
    }
    return Sync();
  }

  absl::StatusOr<BatchStats> TrainStep(const float* images, const int32_t* labels, int batch,
                                       float learning_rate, Emission* out) override {
    RECKON_RETURN_IF_ERROR(StageRows(images, labels, batch));
    RECKON_RETURN_IF_ERROR(LaunchTrainStep(learning_rate, out));
    return FinishTrainStep();
  }

  absl::Status StageBatch(std::span<const float> images, std::span<const int32_t> labels) override {
    staged_ = nullptr;
    const size_t rows = labels.size();
    if (rows < 1 || rows > size_t(config_.max_batch)) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch of ", rows, " outside [1, ", config_.max_batch, "]"));
    }
    if (images.size() != rows * features()) {
      return absl::InvalidArgumentError(absl::StrCat("a batch of ", rows, " samples has ",
                                                     images.size(), " image values, not ", rows,
                                                     " x ", features()));
    }
    RECKON_RETURN_IF_ERROR(model::CheckLabels(labels, config_.shape.classes()));
    // Not the input a launched step reads (nor the last one's: its step may
    // still be on the device, and its copy event is what the next wait needs).
    Input* input = &inputs_[last_input_ == &inputs_[0] ? 1 : 0];
    RECKON_RETURN_IF_ERROR(
        Upload(images.data(), labels.data(), static_cast<int>(rows), input, copy_stream_));
    staged_ = input;
    return absl::OkStatus();
  }

  // The copy of the staged batch is waited for on the device, not here.
  absl::Status LaunchTrainStep(float learning_rate, Emission* out) override {
    if (launched_out_ != nullptr) {
      return absl::FailedPreconditionError("a step is launched and not yet finished");
    }
    RECKON_ASSIGN_OR_RETURN(Input* const input, TakeStaged());
    const int batch = input->rows;
    // The peers' last batch runs on beside this compute, unless the step
    // reads the quanta (AdaGrad on the aggregate).
    RECKON_RETURN_IF_ERROR(aggregate_adagrad_ ? replica_->Settle() : replica_->BeforeCompute());
    RECKON_RETURN_IF_ERROR(ForwardBackward(input));
    const size_t n = config_.shape.param_count();
    const OptimizerRule rule = Rule(learning_rate);
    RECKON_RETURN_IF_ERROR(mlp_->CopyStatsOut(batch, train_));  // while the pass runs
    if (config_.mode == UpdateMode::kThreshold) {
      // The optimizer, the residual and Strom's threshold in one pass.
      RECKON_RETURN_IF_ERROR(pass_->LaunchFused(rule, grad_.get(), state_.get(),
                                                replica_->weights(), residual_.get(), n,
                                                config_.step.tau, PeersSinceOwnStep()));
    } else {
      RECKON_RETURN_IF_ERROR(LaunchOptimizerDelta(rule, replica_->weights(), state_.get(),
                                                  grad_.get(), n, stream_, PeersSinceOwnStep()));
    }
    launched_out_ = out;
    launched_rows_ = batch;
    return absl::OkStatus();
  }

  absl::StatusOr<BatchStats> FinishTrainStep() override {
    if (launched_out_ == nullptr) return absl::FailedPreconditionError("no step was launched");
    Emission* const out = std::exchange(launched_out_, nullptr);
    if (config_.mode == UpdateMode::kThreshold) {
      out->dense.clear();
      RECKON_RETURN_IF_ERROR(pass_->Finish(&out->words));
    } else {
      out->words.clear();
      RECKON_RETURN_IF_ERROR(CodecEmit(out));
    }
    if (aggregate_adagrad_) RECKON_RETURN_IF_ERROR(RecordAfterOwn(*out));
    return mlp_->SumStats(train_, launched_rows_);
  }

  absl::StatusOr<BatchStats> TrainStepLocally(const float* images, const int32_t* labels, int batch,
                                              float learning_rate, Emission* scratch) override {
    if (config_.mode != UpdateMode::kCodec || config_.codec.codec != v1::CODEC_DENSE_FP32 ||
        !config_.codec.error_feedback) {
      return Backend::TrainStepLocally(images, labels, batch, learning_rate, scratch);
    }
    scratch->words.clear();
    scratch->dense.clear();
    if (launched_out_ != nullptr) {
      return absl::FailedPreconditionError("a step is launched and not yet finished");
    }
    // A step no peer sees: the next TrainStep's AdaGrad takes no peers'
    // movement (alone, the same bits as with a movement of 0).
    after_own_valid_ = false;
    RECKON_RETURN_IF_ERROR(StageRows(images, labels, batch));
    RECKON_ASSIGN_OR_RETURN(Input* const input, TakeStaged());
    RECKON_RETURN_IF_ERROR(replica_->Settle());  // it writes the quanta
    RECKON_RETURN_IF_ERROR(ForwardBackward(input));
    const size_t n = config_.shape.param_count();
    RECKON_RETURN_IF_ERROR(LaunchOptimizerDelta(Rule(learning_rate), replica_->weights(),
                                                state_.get(), grad_.get(), n, stream_));
    RECKON_RETURN_IF_ERROR(counters_.Resize(1));
    RECKON_RETURN_IF_ERROR(h_counters_.Resize(1));
    RECKON_RETURN_IF_ERROR(LaunchDenseApplyLocal(grad_.get(), residual_.get(), replica_->quanta(),
                                                 replica_->weights(), n, config_.fraction_bits,
                                                 counters_.get(), stream_));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_counters_.get(), counters_.get(),
                                                sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                                stream_));
    RECKON_RETURN_IF_ERROR(mlp_->CopyStatsOut(batch, train_));
    absl::StatusOr<BatchStats> stats = mlp_->SumStats(train_, batch);  // waits for the stream
    if (!stats.ok()) return stats;
    if (const unsigned long long bad = h_counters_.get()[0]; bad != ~0ull) {
      float value = 0;
      RECKON_RETURN_IF_ERROR(CopyOut(residual_.get() + bad, &value, sizeof(value), "the residual"));
      return absl::InvalidArgumentError(
          absl::StrCat("residual element ", bad, " is ", value,
                       "; nothing was emitted (diverged training? lower the learning rate)"));
    }
    return stats;
  }

  void SetThresholdStep(const codec::ThresholdStep& step) override { config_.step = step; }
  void SetMomentum(double momentum) override { config_.optimizer.momentum = momentum; }

  // One message (a worker's own step, a trial's): the next step sees it.
  absl::Status ApplyUpdates(int64_t step_quanta, std::span<const uint32_t> words) override {
    const model::UpdateRef one{step_quanta, words, {}};
    return replica_->ApplyBatch(std::span<const model::UpdateRef>(&one, 1),
                                DeviceReplica::Overlap::kNone);
  }

  // The last step's words, already on the device: one message applied from
  // there (its end and step cross, 16 bytes); `words` are those words
  // (Backend::ApplyOwnEmission's contract).
  absl::Status ApplyOwnEmission(int64_t step_quanta, std::span<const uint32_t> words) override {
    return replica_->ApplyOwnEmission(pass_.get(), step_quanta, words);
  }

  // All messages in one launch; all or nothing across the batch. The
  // peers' messages: applied beside the next step's compute, which sees
  // them a step later (issue 37's overlap; cuda/device_replica.h), except
  // with AdaGrad on the aggregate, whose step measures the peers' movement
  // in the quanta and so waits for it.
  absl::Status ApplyUpdateBatch(std::span<const model::UpdateRef> updates) override {
    // Quanta-codec messages (one codec per cluster, so never mixed with
    // threshold ones): one ApplyDense each, as the default does.
    for (const model::UpdateRef& u : updates) {
      if (!u.quanta.empty()) return Backend::ApplyUpdateBatch(updates);
    }
    return replica_->ApplyBatch(updates, aggregate_adagrad_
                                             ? DeviceReplica::Overlap::kNone
                                             : DeviceReplica::Overlap::kBesideNextCompute);
  }

  absl::Status ApplyDense(codec::QuantaSpan quanta) override {
    return replica_->ApplyDense(quanta);
  }

  absl::StatusOr<BatchStats> Evaluate(const float* images, const int32_t* labels,
                                      size_t count) override {
    if (absl::Status s =
            model::CheckLabels(std::span<const int32_t>(labels, count), config_.shape.classes());
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("evaluation: ", s.message()));
    }
    RECKON_RETURN_IF_ERROR(replica_->Settle());
    BatchStats total;
    const size_t features = this->features();
    for (size_t begin = 0; begin < count; begin += kEvalChunk) {
      const int n = static_cast<int>(std::min<size_t>(kEvalChunk, count - begin));
      absl::Status s = mlp_->Resize(kEvalChunk, &eval_);
      if (s.ok()) s = eval_input_.Resize(kEvalChunk, features);
      if (s.ok()) s = Upload(images + begin * features, labels + begin, n, &eval_input_, stream_);
      if (s.ok()) {
        s = mlp_->Forward(replica_->weights(), eval_input_.x.get(), eval_input_.labels.get(), n,
                          &eval_, /*with_delta=*/false);
      }
      if (s.ok()) s = mlp_->CopyStatsOut(n, eval_);
      absl::StatusOr<BatchStats> part = s.ok() ? mlp_->SumStats(eval_, n) : s;
      if (!part.ok()) {
        return absl::Status(part.status().code(),
                            absl::StrCat("evaluation: ", part.status().message()));
      }
      total.loss_sum += part->loss_sum;
      total.correct += part->correct;
    }
    return total;
  }

 private:
  static constexpr int kEvalChunk = 1000;

  size_t features() const { return size_t(config_.shape.inputs()); }

  // A batch's samples, in pinned host memory and on the device: the two
  // training inputs take turns (one staged while the other's step
  // computes); evaluation has its own.
  struct Input {
    Input() = default;
    Input(const Input&) = delete;
    Input& operator=(const Input&) = delete;
    ~Input() {
      if (copied != nullptr) cudaEventDestroy(copied);
      if (consumed != nullptr) cudaEventDestroy(consumed);
    }
    absl::Status Resize(int batch, size_t features) {
      if (copied == nullptr) {
        RECKON_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
        RECKON_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&consumed, cudaEventDisableTiming));
      }
      RECKON_RETURN_IF_ERROR(x.Resize(size_t(batch) * features));
      RECKON_RETURN_IF_ERROR(labels.Resize(batch));
      RECKON_RETURN_IF_ERROR(h_x.Resize(size_t(batch) * features));
      return h_labels.Resize(batch);
    }
    int rows = 0;
    DeviceBuffer<float> x;
    DeviceBuffer<int32_t> labels;
    PinnedBuffer<float> h_x;
    PinnedBuffer<int32_t> h_labels;
    // Recorded after the copy to the device (the pinned memory is free
    // again, the device memory ready) and after the last kernel reading the
    // device memory (it may be overwritten). Never recorded: no wait.
    cudaEvent_t copied = nullptr;
    cudaEvent_t consumed = nullptr;
  };

  // AdaGrad on the aggregate (model/optimizer.h): what the peers moved the
  // replica since this worker's last step, when there was one.
  PeerMovement PeersSinceOwnStep() const {
    if (!aggregate_adagrad_ || !after_own_valid_) return {};
    return PeerMovement{replica_->quanta(), after_own_.get(), replica_->quantum()};
  }
  // The replica as it will be once the caller has applied this step's own
  // emission (from the device: the pass's words, or the dense quanta), so
  // that at the next step quanta - after_own_ is exactly the peers' part.
  absl::Status RecordAfterOwn(const Emission& own) {
    if (config_.mode == UpdateMode::kThreshold) {
      RECKON_RETURN_IF_ERROR(
          replica_->ProjectOwnStep(pass_->device_words(), pass_->finished_count(),
                                   config_.step.step_quanta, {}, after_own_.get()));
    } else {
      RECKON_RETURN_IF_ERROR(
          replica_->ProjectOwnStep(nullptr, 0, 0, own.quanta(), after_own_.get()));
    }
    after_own_valid_ = true;
    return absl::OkStatus();
  }

  OptimizerRule Rule(float learning_rate) const {
    const auto& o = config_.optimizer;
    OptimizerRule rule;
    rule.kind = o.kind == OptimizerKind::kSgd ? 0 : o.kind == OptimizerKind::kMomentum ? 1 : 2;
    rule.lr = learning_rate;
    rule.momentum = static_cast<float>(o.momentum);
    rule.eps = static_cast<float>(o.adagrad_eps);
    rule.weight_decay = static_cast<float>(o.weight_decay);
    return rule;
  }

  // The batch goes through pinned memory, so the copy is a true async DMA
  // on `stream`. Its labels were checked (CheckLabels) by the caller.
  absl::Status Upload(const float* images, const int32_t* labels, int batch, Input* input,
                      cudaStream_t stream) {
    // Its last copy has left the pinned memory; the last step reading the
    // device memory is past (on the device: the copy stream waits).
    RECKON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(input->copied));
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, input->consumed));
    const size_t x_bytes = size_t(batch) * features() * sizeof(float);
    std::memcpy(input->h_x.get(), images, x_bytes);
    std::memcpy(input->h_labels.get(), labels, batch * sizeof(int32_t));
    RECKON_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(input->x.get(), input->h_x.get(), x_bytes, cudaMemcpyHostToDevice, stream));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(input->labels.get(), input->h_labels.get(),
                                                batch * sizeof(int32_t), cudaMemcpyHostToDevice,
                                                stream));
    RECKON_CUDA_RETURN_IF_ERROR(cudaEventRecord(input->copied, stream));
    input->rows = batch;
    return absl::OkStatus();
  }

  absl::Status StageRows(const float* images, const int32_t* labels, int batch) {
    if (batch < 1 || batch > config_.max_batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch of ", batch, " outside [1, ", config_.max_batch, "]"));
    }
    return StageBatch(std::span<const float>(images, size_t(batch) * features()),
                      std::span<const int32_t>(labels, size_t(batch)));
  }

  // The staged input, no longer staged: the compute stream waits for its
  // copy.
  absl::StatusOr<Input*> TakeStaged() {
    if (staged_ == nullptr) return absl::FailedPreconditionError("no batch is staged for the step");
    Input* const input = std::exchange(staged_, nullptr);
    last_input_ = input;
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, input->copied));
    return input;
  }

  // A training step's forward and backward passes on `input` into grad_;
  // the input's device memory is free again after them.
  absl::Status ForwardBackward(Input* input) {
    RECKON_RETURN_IF_ERROR(mlp_->Forward(replica_->weights(), input->x.get(), input->labels.get(),
                                         input->rows, &train_, /*with_delta=*/true));
    RECKON_RETURN_IF_ERROR(
        mlp_->Backward(replica_->weights(), input->x.get(), input->rows, &train_, grad_.get()));
    RECKON_CUDA_RETURN_IF_ERROR(cudaEventRecord(input->consumed, stream_));
    return absl::OkStatus();
  }

  // kCodec: the delta joins the residual on the device. Onebit and dyntree8
  // encode there too (cuda/device_codec.h: the message's parts and the
  // quanta cross to the host). Dense fp32 encodes on the host
  // (codec/codec.h) from a copy, which goes back: 8 bytes per parameter
  // cross PCIe, as its payload (4 per parameter) would anyway.
  absl::Status CodecEmit(Emission* out) {
    const size_t n = config_.shape.param_count();
    if (device_codec_ != nullptr) {
      return device_codec_->Encode(grad_.get(), residual_.get(), n, &out->encoded, &out->dense);
    }
    RECKON_RETURN_IF_ERROR(LaunchAccumulate(grad_.get(), residual_.get(), n, stream_));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        h_residual_.get(), residual_.get(), n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    RECKON_RETURN_IF_ERROR(Sync());
    RECKON_RETURN_IF_ERROR(codec::EncodeWithFeedback(*codec_, config_.codec,
                                                     std::span<float>(h_residual_.get(), n),
                                                     &out->encoded, &out->dense));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        residual_.get(), h_residual_.get(), n * sizeof(float), cudaMemcpyHostToDevice, stream_));
    return absl::OkStatus();
  }

  absl::Status Sync() {
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  // Reads for the const accessors, which have no error path: a failure is
  // printed and leaves zeros, which no healthy replica's hash matches.
  // Copies `bytes` of device memory to the host and waits: an error names
  // `what` was being read (nothing of the host buffer is to be trusted).
  absl::Status CopyOut(const void* device, void* host, size_t bytes, const char* what) const {
    return CopyToHost(device, host, bytes, stream_, what);
  }

  BackendConfig config_;
  DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // staged batches' copies to the device
  const CublasApi* blas_ = nullptr;  // set by Init
  cublasHandle_t cublas_ = nullptr;
  // The replica: quanta, their float copy, the batched apply.
  std::unique_ptr<DeviceReplica> replica_;
  DeviceBuffer<float> residual_, grad_, state_;
  // AdaGrad on the aggregate only: the replica after this worker's own last
  // step (RecordAfterOwn), and whether there was one since the last load.
  const bool aggregate_adagrad_;
  DeviceBuffer<int64_t> after_own_;
  bool after_own_valid_ = false;
  std::unique_ptr<ThresholdPass> pass_;
  std::unique_ptr<codec::Codec> codec_;        // kCodec only
  std::unique_ptr<DeviceCodec> device_codec_;  // kCodec, onebit and dyntree8
  PinnedBuffer<float> h_residual_;             // kCodec, dense fp32
  DeviceBuffer<unsigned long long> counters_;  // TrainStepLocally's refused index
  PinnedBuffer<unsigned long long> h_counters_;
  std::optional<DeviceMlp> mlp_;  // set by Init
  DeviceMlp::Batch train_, eval_;
  Input inputs_[2];
  Input eval_input_;
  Input* staged_ = nullptr;      // the batch the next step takes, if staged
  Input* last_input_ = nullptr;  // the last step's
  // Between LaunchTrainStep and FinishTrainStep: where the emission goes,
  // and the batch's rows.
  Emission* launched_out_ = nullptr;
  int launched_rows_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<model::Backend>> MakeCudaBackend(const BackendConfig& config) {
  if (config.max_batch < 1) return absl::InvalidArgumentError("batch size must be at least 1");
  if (config.shape.param_count() > kMaxDeviceElements) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA backend holds at most 2^31 - 1 "
                     "parameters; this model has ",
                     config.shape.param_count()));
  }
  if (config.fraction_bits < 0 || config.fraction_bits > codec::kMaxFractionBits) {
    return absl::InvalidArgumentError(
        absl::StrCat("fraction bits ", config.fraction_bits, " outside [0, 62]"));
  }
  absl::StatusOr<DeviceInfo> device = ProbeDevice();
  if (!device.ok()) return device.status();
  auto backend = std::make_unique<CudaBackend>(config, *device);
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return std::unique_ptr<model::Backend>(std::move(backend));
}

}  // namespace reckon::cuda
