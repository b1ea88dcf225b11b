// Strom's residual thresholding on the GPU (docs/design.md step 5), the device
// twin of codec::QuantizeResidual, bit-exact with it:
//
//   R_i += delta_i                         (float32 add, as AccumulateDelta)
//   R_i >= tau:  emit (i, +), R_i -= tau   (float32 subtract, tau exact)
//   R_i <= -tau: emit (i, -), R_i += tau
//
// and the emitted packed32 words compacted in ascending index order. Two
// compaction methods, measured side by side by `reckonctl bench gpu`:
//   kCubSelect:  one fused elementwise kernel writes every element's word
//                (or a no-word marker), then cub::DeviceSelect::If keeps the
//                words: 16 bytes per element plus CUB's own pass.
//   kSinglePass: one kernel does the pass and the compaction, tile by tile,
//                with a block scan and decoupled look-back across tiles
//                (CUB's ScanTileState): 12 bytes per element.
// Both emit the same words and leave the same residual.
//
// LaunchFused folds the optimizer into the single pass (issue 37): the
// gradient and the optimizer's state are read, the state written back, and
// the optimizer's change added into the residual in the same kernel, so the
// delta never exists in memory. SGD: 12 bytes an element (gradient and
// residual read, residual written) where the optimizer kernel and the pass
// took 20 (gradient read, delta written, then delta and residual read,
// residual written); momentum and AdaGrad: 20 for 28. Weight decay reads
// the weights too (4 more in both). Bit-exact with model::AccumulateDelta
// followed by codec::QuantizeResidual (cuda/device_elementwise.h).
//
// All or nothing, as on the CPU: a NaN or Inf in R_i + delta_i anywhere
// makes Finish return kInvalidArgument naming the first such index, with no
// words emitted and the residual holding R + delta (the emitted elements'
// pre-subtraction values are kept aside during the pass and restored). A NaN
// element stays a NaN, with the device's payload: IEEE 754 leaves the
// payload of an operation's NaN to the machine (the GPU's NaN + 0 is its
// canonical 0x7FFFFFFF), so callers must not rely on a NaN's bits.
//
// Memory: everything is allocated by Create for up to `capacity` elements
// (temp storage, the no-word buffer, pinned host buffers); a step allocates
// nothing, except that the pinned word buffer grows when a step emits more
// words than any before it.
//
// Threading: not thread-safe; every call enqueues on the given stream.
//
// CUDA files build as C++17 (CMake 3.25 has no CUDA20 for nvcc), so the
// headers they include take plain pointers and floats, no std::span.
#ifndef RECKON_CUDA_THRESHOLD_PASS_H_
#define RECKON_CUDA_THRESHOLD_PASS_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuda/device_elementwise.h"

namespace reckon::cuda {

enum class CompactionMethod { kCubSelect, kSinglePass };
std::string CompactionMethodName(CompactionMethod method);

// The largest residual the device pass takes: 2^31 - 1 elements, so that the
// packed word 0x7FFFFFFF (index 2^31 - 1, positive) can never be a real
// update and serves as the no-word marker.
inline constexpr uint64_t kMaxDeviceElements = (uint64_t{1} << 31) - 1;

class ThresholdPass {
 public:
  // kInvalidArgument when capacity exceeds kMaxDeviceElements; kInternal
  // (with CUDA's words) when an allocation fails.
  static absl::StatusOr<std::unique_ptr<ThresholdPass>> Create(uint64_t capacity,
                                                               CompactionMethod method,
                                                               cudaStream_t stream);
  ~ThresholdPass();
  ThresholdPass(const ThresholdPass&) = delete;
  ThresholdPass& operator=(const ThresholdPass&) = delete;

  CompactionMethod method() const { return method_; }

  // Enqueues the pass over d_residual[0, n) (device memory), adding
  // d_delta first when it is not null, with threshold `tau`: the exact
  // float32 of codec::ThresholdStep (so that what the residual loses is
  // exactly step_quanta quanta). Returns at once; the count and words are
  // not ready until Finish. REQUIRES: n <= capacity, one Launch per Finish.
  absl::Status Launch(const float* d_delta, float* d_residual, uint64_t n, float tau);

  // The fused pass: like Launch with delta = the optimizer's change
  // (cuda/device_elementwise.h OptimizerDelta of `rule`) computed here from
  // d_grad (not written), d_state (read and written; REQUIRES non-null
  // unless rule.kind is sgd) and d_weights (read only when
  // rule.weight_decay != 0). On NaN/Inf the state keeps its update, as on
  // the CPU. A single-pass method only (FailedPrecondition for kCubSelect).
  // With `peers` (AdaGrad on the aggregate: rule.kind 2 and the state, else
  // kInvalidArgument) the delta is AdagradAggregateDelta's, each weight's
  // PeerStep read from `peers`' quanta (16 bytes more an element).
  absl::Status LaunchFused(const OptimizerRule& rule, const float* d_grad, float* d_state,
                           const float* d_weights, float* d_residual, uint64_t n, float tau,
                           const PeerMovement& peers = {});

  // Waits for the last Launch. OK: `*words` holds the emitted words,
  // ascending, copied from the device through pinned memory. NaN/Inf: see
  // above. `device_words()` then holds the same `*words` on the device.
  absl::Status Finish(std::vector<uint32_t>* words);

  // Like Finish but leaves the words on the device: their count, with
  // d_words() valid for that many. For benchmarks of the pass alone.
  absl::StatusOr<uint64_t> FinishOnDevice();

  const uint32_t* device_words() const { return d_words_; }
  // After an OK Finish: the words it returned, still in pinned host memory
  // (valid until the next Launch), and their count.
  const uint32_t* host_words() const { return h_words_; }
  uint64_t finished_count() const { return finished_count_; }

 private:
  ThresholdPass(uint64_t capacity, CompactionMethod method, cudaStream_t stream)
      : capacity_(capacity), method_(method), stream_(stream) {}
  absl::Status Allocate();
  // Checks the arguments, resets the counters, marks the pass launched.
  absl::Status Begin(float* d_residual, uint64_t n, float tau);
  template <typename Source>
  absl::Status LaunchSinglePass(const Source& source, float* d_residual, uint64_t n, float tau);
  absl::Status RestoreAndReport(float* d_residual);

  uint64_t capacity_;
  CompactionMethod method_;
  cudaStream_t stream_;

  // Device.
  uint32_t* d_words_ = nullptr;      // compacted words (capacity)
  uint32_t* d_all_words_ = nullptr;  // kCubSelect: every element's word or marker
  float* d_stash_ = nullptr;         // pre-subtraction R_i of emitted elements
  void* d_temp_ = nullptr;           // CUB temp storage / tile states
  size_t temp_bytes_ = 0;
  // d_counters_[0]: emitted count; [1]: first non-finite index (or ~0).
  unsigned long long* d_counters_ = nullptr;

  // Host, pinned.
  unsigned long long* h_counters_ = nullptr;
  uint32_t* h_words_ = nullptr;
  uint64_t h_words_capacity_ = 0;

  // The last Launch.
  uint64_t finished_count_ = 0;
  float* launched_residual_ = nullptr;
  bool launched_ = false;
};

// The benchmark's reference (`reckonctl bench gpu`): plain
// cub::DeviceSelect::If keeping the residual values with |r| >= tau, on the
// residual alone (no delta, no residual update, no words). Best seconds of
// `reps` runs, timed with CUDA events; temp storage allocated outside them.
absl::StatusOr<double> TimeSelectIfOnResidual(const float* d_residual, uint64_t n, float tau,
                                              int reps);

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_THRESHOLD_PASS_H_
