#include "cuda/device_replica.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/fixed_point.h"
#include "codec/update_words.h"
#include "cuda/kernels.h"

namespace reckon::cuda {

absl::StatusOr<std::unique_ptr<DeviceReplica>> DeviceReplica::Create(uint64_t param_count,
                                                                     int fraction_bits,
                                                                     cudaStream_t stream) {
  std::unique_ptr<DeviceReplica> r(
      new DeviceReplica(param_count, std::ldexp(1.0, -fraction_bits), stream));
  RECKON_RETURN_IF_ERROR(r->quanta_.Resize(param_count));
  RECKON_RETURN_IF_ERROR(r->weights_.Resize(param_count));
  RECKON_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(r->quanta_.get(), 0, param_count * sizeof(int64_t), stream));
  RECKON_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(r->weights_.get(), 0, param_count * sizeof(float), stream));
  RECKON_RETURN_IF_ERROR(r->wrapped_.Resize(1));
  RECKON_RETURN_IF_ERROR(r->h_wrapped_.Resize(1));
  *r->h_wrapped_.get() = 0;
  RECKON_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(r->wrapped_.get(), 0, sizeof(unsigned long long), stream));
  RECKON_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&r->apply_done_, cudaEventDisableTiming));
  RECKON_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&r->staging_free_, cudaEventDisableTiming));
  RECKON_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&r->apply_stream_, cudaStreamNonBlocking));
  RECKON_RETURN_IF_ERROR(r->Sync());
  return r;
}

DeviceReplica::~DeviceReplica() {
  // The staging buffers are freed after this: what reads them ends first.
  if (apply_stream_ != nullptr) {
    cudaStreamSynchronize(apply_stream_);
    cudaStreamDestroy(apply_stream_);
  }
  if (staging_busy_) cudaEventSynchronize(staging_free_);
  if (apply_done_ != nullptr) cudaEventDestroy(apply_done_);
  if (staging_free_ != nullptr) cudaEventDestroy(staging_free_);
}

uint64_t DeviceReplica::wrapped() const {
  if (apply_in_flight_ && cudaEventQuery(apply_done_) != cudaSuccess) return wrapped_before_;
  return *h_wrapped_.get();
}

absl::Status DeviceReplica::RefreshApplied() {
  if (!apply_unrefreshed_) return absl::OkStatus();
  apply_unrefreshed_ = false;
  RECKON_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, apply_done_));
  RECKON_RETURN_IF_ERROR(LaunchRefreshTouched(apply_words_.get(), apply_total_, quanta_.get(),
                                              weights_.get(), quantum_, stream_));
  RECKON_CUDA_RETURN_IF_ERROR(cudaEventRecord(staging_free_, stream_));
  staging_busy_ = true;
  return absl::OkStatus();
}

absl::Status DeviceReplica::Settle() { return RefreshApplied(); }

absl::Status DeviceReplica::BeforeCompute() {
  if (!apply_since_compute_) RECKON_RETURN_IF_ERROR(RefreshApplied());
  apply_since_compute_ = false;
  return absl::OkStatus();
}

absl::Status DeviceReplica::FinishApplyInFlight() {
  RECKON_RETURN_IF_ERROR(Settle());
  // staging_free_ follows the wait for apply_done_: the apply, its count's
  // copy back and its refresh are all done.
  if (staging_busy_) {
    staging_busy_ = false;
    RECKON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staging_free_));
  }
  apply_in_flight_ = false;
  return absl::OkStatus();
}

absl::Status DeviceReplica::Sync() const {
  RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::Status DeviceReplica::ReadWrappedAndSync() {
  RECKON_RETURN_IF_ERROR(FinishApplyInFlight());  // before h_wrapped_ is written again
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_wrapped_.get(), wrapped_.get(),
                                              sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                              stream_));
  return Sync();
}

absl::Status DeviceReplica::Load(std::span<const int64_t> quanta) {
  if (quanta.size() != param_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights have ", quanta.size(), " values, replica has ", param_count_));
  }
  RECKON_RETURN_IF_ERROR(Settle());  // an apply in flight lands before the overwrite
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(quanta_.get(), quanta.data(), quanta.size_bytes(),
                                              cudaMemcpyHostToDevice, stream_));
  RECKON_RETURN_IF_ERROR(
      LaunchRefreshWeights(quanta_.get(), weights_.get(), param_count_, quantum_, stream_));
  return Sync();
}

absl::StatusOr<std::vector<int64_t>> DeviceReplica::Read() const {
  std::vector<int64_t> out(param_count_);
  // Quanta only: after the apply in flight, whose floats may wait.
  if (apply_in_flight_) RECKON_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, apply_done_));
  RECKON_RETURN_IF_ERROR(
      CopyToHost(quanta_.get(), out.data(), out.size() * sizeof(int64_t), stream_, "the weights"));
  return out;
}

absl::StatusOr<std::string> DeviceReplica::Hash() const {
  RECKON_ASSIGN_OR_RETURN(std::vector<int64_t> quanta, Read());
  return codec::WeightHashOf(quanta);
}

absl::Status DeviceReplica::ApplyBatch(std::span<const model::UpdateRef> updates, Overlap overlap) {
  uint64_t total = 0;
  for (size_t m = 0; m < updates.size(); ++m) {
    if (updates[m].step_quanta <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("update ", m, ": step_quanta ", updates[m].step_quanta, " must be > 0"));
    }
    if (!updates[m].quanta.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("update ", m, ": a dense message in a batch of threshold ones"));
    }
    if (absl::Status s = codec::ValidateUpdateWords(updates[m].words, param_count_); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("update ", m, ": ", s.message()));
    }
    total += updates[m].words.size();
  }
  if (total == 0) return absl::OkStatus();
  RECKON_RETURN_IF_ERROR(FinishApplyInFlight());  // the staging buffers are free again
  const size_t messages = updates.size();
  RECKON_RETURN_IF_ERROR(apply_words_.Resize(total));
  RECKON_RETURN_IF_ERROR(apply_ends_.Resize(messages));
  RECKON_RETURN_IF_ERROR(apply_steps_.Resize(messages));
  RECKON_RETURN_IF_ERROR(h_apply_words_.Resize(total));
  RECKON_RETURN_IF_ERROR(h_apply_meta_.Resize(2 * messages));
  uint32_t* staged = h_apply_words_.get();
  uint64_t* ends = reinterpret_cast<uint64_t*>(h_apply_meta_.get());
  int64_t* steps = h_apply_meta_.get() + messages;
  uint64_t at = 0;
  for (size_t m = 0; m < messages; ++m) {
    std::memcpy(staged + at, updates[m].words.data(), updates[m].words.size_bytes());
    at += updates[m].words.size();
    ends[m] = at;
    steps[m] = updates[m].step_quanta;
  }
  // On the apply stream: every earlier write of the quanta on the main
  // stream has finished (each such call waits before it returns).
  cudaStream_t on = apply_stream_;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(apply_words_.get(), staged, total * sizeof(uint32_t),
                                              cudaMemcpyHostToDevice, on));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(apply_ends_.get(), ends, messages * sizeof(uint64_t),
                                              cudaMemcpyHostToDevice, on));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(apply_steps_.get(), steps, messages * sizeof(int64_t),
                                              cudaMemcpyHostToDevice, on));
  // Apply modulo 2^64 (as every replica does: nothing to refuse or take
  // back) to the quanta only, the count of wraps back; no wait. The floats
  // are refreshed on the main stream (RefreshApplied).
  RECKON_RETURN_IF_ERROR(LaunchApplyWords(apply_words_.get(), total, apply_ends_.get(),
                                          apply_steps_.get(), static_cast<int>(messages),
                                          quanta_.get(), wrapped_.get(), on));
  wrapped_before_ = *h_wrapped_.get();
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      h_wrapped_.get(), wrapped_.get(), sizeof(unsigned long long), cudaMemcpyDeviceToHost, on));
  RECKON_CUDA_RETURN_IF_ERROR(cudaEventRecord(apply_done_, on));
  apply_in_flight_ = true;
  apply_unrefreshed_ = true;
  apply_total_ = total;
  apply_since_compute_ = overlap == Overlap::kBesideNextCompute;
  return absl::OkStatus();
}

absl::Status DeviceReplica::StageOneMessage(uint64_t count, int64_t step_quanta) {
  RECKON_RETURN_IF_ERROR(FinishApplyInFlight());
  RECKON_RETURN_IF_ERROR(apply_ends_.Resize(1));
  RECKON_RETURN_IF_ERROR(apply_steps_.Resize(1));
  RECKON_RETURN_IF_ERROR(h_apply_meta_.Resize(2));
  h_apply_meta_.get()[0] = static_cast<int64_t>(count);
  h_apply_meta_.get()[1] = step_quanta;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(apply_ends_.get(), h_apply_meta_.get(),
                                              sizeof(uint64_t), cudaMemcpyHostToDevice, stream_));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(apply_steps_.get(), h_apply_meta_.get() + 1,
                                              sizeof(int64_t), cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status DeviceReplica::ApplyOwnEmission(const ThresholdPass* pass, int64_t step_quanta,
                                             std::span<const uint32_t> words) {
  const uint64_t count = pass != nullptr ? pass->finished_count() : 0;
  if (words.size() != count) {
    // Not the pass's words (the caller's contract, worker/publisher.h):
    // applying the device's would apply something else than `words`.
    return absl::FailedPreconditionError(
        absl::StrCat("own emission of ", words.size(), " words, but the last pass emitted ", count,
                     ": not applied (words made elsewhere go through ApplyUpdates)"));
  }
  if (count == 0 || step_quanta <= 0) {
    // Nothing to apply, or a step the apply refuses (its error named there).
    const model::UpdateRef one{step_quanta, words, {}};
    RECKON_RETURN_IF_ERROR(ApplyBatch(std::span<const model::UpdateRef>(&one, 1), Overlap::kNone));
    return FinishApplyInFlight();  // as the path below: applied when this returns
  }
  const uint32_t* d_words = pass->device_words();
  RECKON_RETURN_IF_ERROR(StageOneMessage(count, step_quanta));
  RECKON_RETURN_IF_ERROR(LaunchApplyWords(d_words, count, apply_ends_.get(), apply_steps_.get(), 1,
                                          quanta_.get(), wrapped_.get(), stream_));
  RECKON_RETURN_IF_ERROR(
      LaunchRefreshTouched(d_words, count, quanta_.get(), weights_.get(), quantum_, stream_));
  return ReadWrappedAndSync();
}

absl::Status DeviceReplica::UploadDense(codec::QuantaSpan dense) {
  RECKON_RETURN_IF_ERROR(dense_in_.Resize(param_count_));
  const int64_t* host = dense.int64s();
  if (dense.is_dense_fp32()) {
    dense_host_.resize(dense.size());
    dense.CopyTo(0, dense.size(), dense_host_.data());
    host = dense_host_.data();
  }
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dense_in_.get(), host, dense.size() * sizeof(int64_t),
                                              cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status DeviceReplica::ApplyDense(codec::QuantaSpan quanta) {
  if (quanta.size() != param_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense update has ", quanta.size(), " values, replica has ", param_count_));
  }
  RECKON_RETURN_IF_ERROR(Settle());  // the apply in flight first: LaunchAddDense is no atomic
  RECKON_RETURN_IF_ERROR(UploadDense(quanta));
  // Modulo 2^64, as every replica adds.
  RECKON_RETURN_IF_ERROR(
      LaunchAddDense(dense_in_.get(), quanta_.get(), param_count_, wrapped_.get(), stream_));
  RECKON_RETURN_IF_ERROR(
      LaunchRefreshWeights(quanta_.get(), weights_.get(), param_count_, quantum_, stream_));
  return ReadWrappedAndSync();
}

absl::Status DeviceReplica::ProjectOwnStep(const uint32_t* d_words, uint64_t count,
                                           int64_t step_quanta, codec::QuantaSpan dense,
                                           int64_t* into) {
  if (!dense.empty() && dense.size() != param_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense step has ", dense.size(), " values, replica has ", param_count_));
  }
  RECKON_RETURN_IF_ERROR(Settle());
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(into, quanta_.get(), param_count_ * sizeof(int64_t),
                                              cudaMemcpyDeviceToDevice, stream_));
  if (count > 0) {
    RECKON_RETURN_IF_ERROR(StageOneMessage(count, step_quanta));
    RECKON_RETURN_IF_ERROR(LaunchApplyWords(d_words, count, apply_ends_.get(), apply_steps_.get(),
                                            1, into, /*wrapped=*/nullptr, stream_));
  }
  if (!dense.empty()) {
    RECKON_RETURN_IF_ERROR(UploadDense(dense));
    RECKON_RETURN_IF_ERROR(
        LaunchAddDense(dense_in_.get(), into, param_count_, /*wrapped=*/nullptr, stream_));
  }
  return Sync();
}

}  // namespace reckon::cuda
