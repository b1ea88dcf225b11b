// The fixed-point replica in device memory (codec/fixed_point.h's contract
// on a GPU): the int64 quanta, the float32 copy the model reads, always
// (float)((double)q * 2^-fraction_bits), and the staging of the batched
// apply (cuda/kernels.h LaunchApplyWords). The CUDA backend and the flat
// replica (cuda/cuda_flat_replica.h) each hold one.
//
// Applies add modulo 2^64, as every replica does, so nothing is refused
// after the words pass their checks and nothing is half-applied.
//
// Threading: one thread calls it; every call enqueues on the stream given
// to Create (not owned) and waits for it before returning, except
// ApplyBatch. The peers' messages are applied on the replica's own apply
// stream while the caller goes on, beside the step's compute (issue 37's
// overlap, Seide 2014's double buffering): that apply adds to the quanta
// only (atomics), and the floats it touched are refreshed on the main
// stream later, where no kernel reads them, so the compute never sees a
// float half-refreshed. Who reads weights() or quanta() on the main stream
// calls Settle first (everything applied, floats included, is in order
// before what it enqueues next) or, for a training step's compute, which
// reads weights() only, BeforeCompute (an apply enqueued since the last
// BeforeCompute runs on beside it and the step after sees it). Who writes
// quanta() on the main stream (the local dense apply) settles first and
// has finished before its call returns. Host C++20.
#ifndef RECKON_CUDA_DEVICE_REPLICA_H_
#define RECKON_CUDA_DEVICE_REPLICA_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuda/device_buffer.h"
#include "cuda/threshold_pass.h"
#include "model/backend.h"

namespace reckon::cuda {

class DeviceReplica {
 public:
  // All zeros. kInternal (CUDA's words) when an allocation fails.
  static absl::StatusOr<std::unique_ptr<DeviceReplica>> Create(uint64_t param_count,
                                                               int fraction_bits,
                                                               cudaStream_t stream);

  uint64_t param_count() const { return param_count_; }
  double quantum() const { return quantum_; }
  // Device pointers, param_count each, as of the last Settle (weights():
  // or BeforeCompute) on the main stream. Who writes quanta() directly (the
  // backend's local dense apply) refreshes weights() in the same launch.
  int64_t* quanta() const { return quanta_.get(); }
  float* weights() const { return weights_.get(); }
  // Orders the main stream's next work after every apply: quanta and
  // floats hold everything applied. No host wait.
  absl::Status Settle();
  // Before a training step's compute is enqueued on the main stream: the
  // floats hold every apply enqueued before the last BeforeCompute; an
  // apply enqueued since then runs on beside this compute (it touches
  // quanta only), and its floats are refreshed before the next one. No
  // host wait. The compute must not read quanta().
  absl::Status BeforeCompute();
  ~DeviceReplica();
  // Additions that left the int64 range and wrapped since Create (the
  // host's FixedPointReplica::wrapped), as of the last apply the device
  // has finished: an ApplyBatch still running is counted once it ends (a
  // later call sees it). No wait here.
  uint64_t wrapped() const;

  // kInvalidArgument for another count.
  absl::Status Load(std::span<const int64_t> quanta);
  absl::StatusOr<std::vector<int64_t>> Read() const;
  absl::StatusOr<std::string> Hash() const;
  // Threshold messages (no quanta), in one launch: all or nothing across
  // the batch (kInvalidArgument naming the message whose step or words are
  // wrong; nothing applied then, checked before anything is enqueued).
  // Returns once the apply is enqueued on the apply stream (the words are
  // staged in pinned memory): what reads the replica later sees it
  // applied once it has settled (see the threading note above); a CUDA
  // failure of the apply itself surfaces at the next call that waits.
  // kBesideNextCompute (the peers' messages): the next BeforeCompute
  // leaves it running beside that compute; kNone: the next compute waits
  // for it (a worker's own step, a snapshot's replay).
  enum class Overlap { kNone, kBesideNextCompute };
  absl::Status ApplyBatch(std::span<const model::UpdateRef> updates, Overlap overlap);
  // This replica's own emission: `words` are `pass`'s last Finish's words
  // (null pass: none), which the caller's self-check showed the wire
  // carries (worker/publisher.h). Applied from where the pass left them on
  // the device: only their end and step cross. kFailedPrecondition, nothing
  // applied, when their count is not the pass's (words made elsewhere go
  // through ApplyBatch).
  absl::Status ApplyOwnEmission(const ThresholdPass* pass, int64_t step_quanta,
                                std::span<const uint32_t> words);
  // quanta += `quanta` (a quanta codec's message, either layout:
  // codec/quanta_span.h), weights refreshed.
  absl::Status ApplyDense(codec::QuantaSpan quanta);
  // *into (param_count, device) = the quanta as they will be once this
  // worker's own step is applied: `count` words on the device of
  // +-step_quanta, or `dense` (host; empty for none). The replica is not
  // touched. For AdaGrad on the aggregate: at the next step, quanta - into
  // is what the peers moved (cuda/device_elementwise.h PeerMovement).
  absl::Status ProjectOwnStep(const uint32_t* d_words, uint64_t count, int64_t step_quanta,
                              codec::QuantaSpan dense, int64_t* into);

 private:
  DeviceReplica(uint64_t param_count, double quantum, cudaStream_t stream)
      : param_count_(param_count), quantum_(quantum), stream_(stream) {}
  absl::Status Sync() const;
  // Enqueues on the main stream, behind the apply in flight, the refresh of
  // the floats it touched; the staging buffers are free after
  // staging_free_.
  absl::Status RefreshApplied();
  // One message's end (`count`) and step into apply_ends_ and
  // apply_steps_, enqueued (LaunchApplyWords of one message follows).
  absl::Status StageOneMessage(uint64_t count, int64_t step_quanta);
  // After an apply's kernels: the count of wraps comes back, then the wait.
  absl::Status ReadWrappedAndSync();
  // Settles and waits until the staging buffers are free again (the last
  // apply's copies, kernels and refresh have read them) and the count of
  // wraps is back.
  absl::Status FinishApplyInFlight();

  uint64_t param_count_;
  double quantum_;
  cudaStream_t stream_;
  cudaStream_t apply_stream_ = nullptr;  // owned: the peers' applies
  DeviceBuffer<int64_t> quanta_;
  DeviceBuffer<float> weights_;
  DeviceBuffer<unsigned long long> wrapped_;    // counted by the apply kernels
  PinnedBuffer<unsigned long long> h_wrapped_;  // written by the stream's copies
  // The last ApplyBatch: `apply_done_` recorded on the apply stream after
  // its copies, kernels and the count's copy back; `wrapped_before_` the
  // count before it; `staging_free_` recorded on the main stream after the
  // refresh of its floats. apply_unrefreshed_: the refresh is not enqueued
  // yet; apply_since_compute_: it was enqueued after the last
  // BeforeCompute; staging_busy_: staging_free_ not yet waited for.
  cudaEvent_t apply_done_ = nullptr;
  cudaEvent_t staging_free_ = nullptr;
  bool apply_in_flight_ = false;
  bool apply_unrefreshed_ = false;
  bool apply_since_compute_ = false;
  bool staging_busy_ = false;
  uint64_t apply_total_ = 0;
  uint64_t wrapped_before_ = 0;
  // A dense update's int64 counts on the device (UploadDense), and on the
  // host where it came as a dense payload: converted here, then uploaded.
  // Uploading the payload's 4 bytes a value and converting on the device
  // would halve what crosses PCIe; it wants a GPU session to hold the
  // kernel to the host's bits.
  absl::Status UploadDense(codec::QuantaSpan dense);
  DeviceBuffer<int64_t> dense_in_;
  std::vector<int64_t> dense_host_;
  DeviceBuffer<uint32_t> apply_words_;
  DeviceBuffer<uint64_t> apply_ends_;
  DeviceBuffer<int64_t> apply_steps_;
  PinnedBuffer<uint32_t> h_apply_words_;
  PinnedBuffer<int64_t> h_apply_meta_;
};

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_DEVICE_REPLICA_H_
