#include "cuda/cuda_flat_replica.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/device_buffer.h"
#include "cuda/device_replica.h"
#include "cuda/kernels.h"
#include "cuda/threshold_pass.h"

namespace reckon::cuda {
namespace {

// Makes `device` current for a scope and puts the caller's back (the
// framework's current device is its own).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = CudaStatus(cudaSetDevice(device), "cudaSetDevice", __FILE__, __LINE__);
  }
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;
  absl::Status status_;
};

#define RECKON_ON_DEVICE(device)            \
  DeviceScope reckon_device_scope_(device); \
  RECKON_RETURN_IF_ERROR(reckon_device_scope_.status())

class CudaFlatReplica final : public model::FlatReplica {
 public:
  CudaFlatReplica(uint64_t param_count, DeviceInfo device)
      : param_count_(param_count), device_(std::move(device)) {}

  ~CudaFlatReplica() override {
    DeviceScope scope(device_.ordinal);
    pass_.reset();
    replica_.reset();
    if (framework_done_ != nullptr) cudaEventDestroy(framework_done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init(int fraction_bits) {
    RECKON_ON_DEVICE(device_.ordinal);
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    RECKON_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&framework_done_, cudaEventDisableTiming));
    RECKON_ASSIGN_OR_RETURN(replica_, DeviceReplica::Create(param_count_, fraction_bits, stream_));
    RECKON_RETURN_IF_ERROR(residual_.Resize(param_count_));
    RECKON_RETURN_IF_ERROR(delta_.Resize(param_count_));
    RECKON_RETURN_IF_ERROR(first_bad_.Resize(1));
    RECKON_RETURN_IF_ERROR(h_first_bad_.Resize(1));
    RECKON_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(residual_.get(), 0, param_count_ * sizeof(float), stream_));
    RECKON_ASSIGN_OR_RETURN(
        pass_, ThresholdPass::Create(param_count_, CompactionMethod::kSinglePass, stream_));
    return Sync();
  }

  std::string Describe() const override {
    return absl::StrCat("flat (a framework's parameters, cuda:", device_.ordinal, " ", device_.name,
                        ")");
  }
  uint64_t param_count() const override { return param_count_; }

  absl::Status OrderAfter(uintptr_t stream) override {
    RECKON_ON_DEVICE(device_.ordinal);
    RECKON_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(framework_done_, reinterpret_cast<cudaStream_t>(stream)));
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, framework_done_, 0));
    return absl::OkStatus();
  }

  absl::Status Emit(std::span<const float> params, const codec::ThresholdStep& step,
                    std::vector<uint32_t>* words) override {
    RECKON_ON_DEVICE(device_.ordinal);
    words->clear();
    RECKON_RETURN_IF_ERROR(replica_->Settle());
    RECKON_RETURN_IF_ERROR(LaunchFlatDifference(params.data(), replica_->weights(), delta_.get(),
                                                param_count_, first_bad_.get(), stream_));
    // Read before the residual takes the delta: all or nothing.
    RECKON_RETURN_IF_ERROR(CopyToHost(first_bad_.get(), h_first_bad_.get(),
                                      sizeof(unsigned long long), stream_,
                                      "the first non-finite parameter's index"));
    if (const unsigned long long bad = *h_first_bad_.get(); bad != ~0ull) {
      float value = 0;
      RECKON_RETURN_IF_ERROR(
          CopyToHost(params.data() + bad, &value, sizeof(value), stream_, "a parameter"));
      return model::NonFiniteParameterError(bad, value);
    }
    RECKON_RETURN_IF_ERROR(pass_->Launch(delta_.get(), residual_.get(), param_count_, step.tau));
    return pass_->Finish(words);
  }

  absl::Status WriteInto(std::span<float> params) override {
    RECKON_ON_DEVICE(device_.ordinal);
    RECKON_RETURN_IF_ERROR(replica_->Settle());
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(params.data(), replica_->weights(),
                                                param_count_ * sizeof(float),
                                                cudaMemcpyDeviceToDevice, stream_));
    return Sync();
  }

  absl::Status LoadWeights(std::span<const int64_t> quanta) override {
    RECKON_ON_DEVICE(device_.ordinal);
    return replica_->Load(quanta);
  }
  absl::StatusOr<std::vector<int64_t>> ReadWeights() const override {
    RECKON_ON_DEVICE(device_.ordinal);
    return replica_->Read();
  }
  absl::StatusOr<std::string> WeightHash() const override {
    RECKON_ON_DEVICE(device_.ordinal);
    return replica_->Hash();
  }
  uint64_t WeightsWrapped() const override { return replica_->wrapped(); }
  absl::StatusOr<std::vector<float>> ReadResidual() const override {
    RECKON_ON_DEVICE(device_.ordinal);
    std::vector<float> out(param_count_);
    RECKON_RETURN_IF_ERROR(CopyToHost(residual_.get(), out.data(), out.size() * sizeof(float),
                                      stream_, "the residual"));
    return out;
  }

  absl::Status ApplyUpdates(int64_t step_quanta, std::span<const uint32_t> words) override {
    const model::UpdateRef one{step_quanta, words, {}};
    return ApplyUpdateBatch(std::span<const model::UpdateRef>(&one, 1));
  }
  // The last Emit's words, from the device (DeviceReplica::ApplyOwnEmission's
  // contract: `words` are those words).
  absl::Status ApplyOwnEmission(int64_t step_quanta, std::span<const uint32_t> words) override {
    RECKON_ON_DEVICE(device_.ordinal);
    return replica_->ApplyOwnEmission(pass_.get(), step_quanta, words);
  }
  absl::Status ApplyUpdateBatch(std::span<const model::UpdateRef> updates) override {
    for (const model::UpdateRef& u : updates) {
      if (!u.quanta.empty()) return Replica::ApplyUpdateBatch(updates);
    }
    RECKON_ON_DEVICE(device_.ordinal);
    return replica_->ApplyBatch(updates, DeviceReplica::Overlap::kNone);
  }
  absl::Status ApplyDense(codec::QuantaSpan quanta) override {
    RECKON_ON_DEVICE(device_.ordinal);
    return replica_->ApplyDense(quanta);
  }

 private:
  absl::Status Sync() const {
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  uint64_t param_count_;
  DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t framework_done_ = nullptr;  // recorded on the framework's stream
  std::unique_ptr<DeviceReplica> replica_;
  DeviceBuffer<float> residual_, delta_;
  std::unique_ptr<ThresholdPass> pass_;
  DeviceBuffer<unsigned long long> first_bad_;
  PinnedBuffer<unsigned long long> h_first_bad_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<model::FlatReplica>> MakeCudaFlatReplica(uint64_t param_count,
                                                                        int fraction_bits,
                                                                        int device) {
  if (param_count == 0 || param_count > kMaxDeviceElements) {
    return absl::InvalidArgumentError(
        absl::StrCat("a flat replica on a GPU holds 1 to 2^31 - 1 parameters, not ", param_count));
  }
  if (fraction_bits < 0 || fraction_bits > codec::kMaxFractionBits) {
    return absl::InvalidArgumentError(
        absl::StrCat("fraction bits ", fraction_bits, " outside [0, 62]"));
  }
  RECKON_ASSIGN_OR_RETURN(DeviceInfo info, ProbeDevice(device));
  auto replica = std::make_unique<CudaFlatReplica>(param_count, std::move(info));
  RECKON_RETURN_IF_ERROR(replica->Init(fraction_bits));
  return std::unique_ptr<model::FlatReplica>(std::move(replica));
}

}  // namespace reckon::cuda
