// The fixed-point replica in device memory (codec/fixed_point.h's contract
// on a GPU): the int64 quanta, the float32 copy the model reads, always
// (float)((double)q * 2^-fraction_bits), and the staging of the batched
// apply (cuda/kernels.h LaunchApplyWords). The CUDA backend and the flat
// replica (cuda/flat_replica.h) each hold one.
//
// Applies add modulo 2^64, as every replica does, so nothing is refused
// after the words pass their checks and nothing is half-applied.
//
// Threading: one thread calls it; every call enqueues on the stream given
// to Create (not owned) and waits for it before returning, except
// ApplyBatch: the peers' messages are applied while the caller goes on
// (the next step's batch, its launches: issue 37's overlap), and the next
// call that needs the device's answer or the staging buffers waits for
// them. Host C++20.
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
  // Device pointers, param_count each. Who writes quanta() directly (the
  // backend's local dense apply) refreshes weights() in the same launch.
  int64_t* quanta() const { return quanta_.get(); }
  float* weights() const { return weights_.get(); }
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
  // Returns once the apply is enqueued (the words are staged in pinned
  // memory): what reads the replica later on the stream sees it applied;
  // a CUDA failure of the apply itself surfaces at the next call that
  // waits.
  absl::Status ApplyBatch(std::span<const model::UpdateRef> updates);
  // This replica's own emission, `words` as the wire decoded them: applied
  // from where `pass` (null: none) left them when they are its last
  // Finish's words (only their end and step cross), else uploaded as any
  // message.
  absl::Status ApplyOwnEmission(const ThresholdPass* pass, int64_t step_quanta,
                                std::span<const uint32_t> words);
  // quanta += `quanta` (a dense message), weights refreshed.
  absl::Status ApplyDense(std::span<const int64_t> quanta);
  // *into (param_count, device) = the quanta as they will be once this
  // worker's own step is applied: `count` words on the device of
  // +-step_quanta, or `dense` (host; empty for none). The replica is not
  // touched. For AdaGrad on the aggregate: at the next step, quanta - into
  // is what the peers moved (cuda/elementwise.h PeerMovement).
  absl::Status ProjectOwnStep(const uint32_t* d_words, uint64_t count, int64_t step_quanta,
                              std::span<const int64_t> dense, int64_t* into);

 private:
  DeviceReplica(uint64_t param_count, double quantum, cudaStream_t stream)
      : param_count_(param_count), quantum_(quantum), stream_(stream) {}
  absl::Status Sync() const;
  // One message's end (`count`) and step into apply_ends_ and
  // apply_steps_, enqueued (LaunchApplyWords of one message follows).
  absl::Status StageOneMessage(uint64_t count, int64_t step_quanta);
  // After an apply's kernels: the count of wraps comes back, then the wait.
  absl::Status ReadWrappedAndSync();
  // Waits for the ApplyBatch in flight, if any (its staging buffers are
  // then free and its count of wraps read).
  absl::Status FinishApplyInFlight();

  uint64_t param_count_;
  double quantum_;
  cudaStream_t stream_;
  DeviceBuffer<int64_t> quanta_;
  DeviceBuffer<float> weights_;
  DeviceBuffer<unsigned long long> wrapped_;    // counted by the apply kernels
  PinnedBuffer<unsigned long long> h_wrapped_;  // written by the stream's copies
  // ApplyBatch in flight: `apply_done_` recorded after its copies, kernels
  // and the count's copy back; `wrapped_before_` the count before it.
  cudaEvent_t apply_done_ = nullptr;
  bool apply_in_flight_ = false;
  uint64_t wrapped_before_ = 0;
  DeviceBuffer<int64_t> dense_in_;
  DeviceBuffer<uint32_t> apply_words_;
  DeviceBuffer<uint64_t> apply_ends_;
  DeviceBuffer<int64_t> apply_steps_;
  PinnedBuffer<uint32_t> h_apply_words_;
  PinnedBuffer<int64_t> h_apply_meta_;
};

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_DEVICE_REPLICA_H_
