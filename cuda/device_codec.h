// Onebit (Seide 2014) and dyntree8 (Dettmers 2015) encoded on the device,
// for the CUDA backend's codec mode: the residual never leaves the GPU.
// Before, it crossed PCIe twice a step (4 bytes per parameter each way)
// and the host encoded it on one thread (onebit's column statistics).
//
// A step (Encode) enqueues, on the backend's stream: residual += delta
// with the refusal check; the codec's kernels (cuda/codec_kernels.h); the
// copies of what the message needs to the host (onebit: 8 bytes per column
// and 1 bit per parameter; dyntree8: 4 bytes per tensor and 1 byte per
// parameter) and of the decoded quanta (8 bytes per parameter: the
// worker applies and publishes them, as with the host codecs); then it
// waits once. The message and quanta are bit for bit those of
// codec::EncodeWithFeedback with the host codec on the same residual, and
// so is the residual it leaves (tests/cuda_elementwise_test.cc checks the
// arithmetic here, tests/cuda_backend_test.cc the kernels on a GPU).
//
// Threading: the CUDA backend's thread; the device current on it.
#ifndef RECKON_CUDA_DEVICE_CODEC_H_
#define RECKON_CUDA_DEVICE_CODEC_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/codec.h"
#include "proto/reckon.pb.h"

namespace reckon::cuda {

class DeviceCodec {
 public:
  virtual ~DeviceCodec() = default;
  // residual += delta, then as codec::EncodeWithFeedback: a refused value
  // (NaN, Inf, too large for the grid) returns kInvalidArgument naming its
  // index and value, with the residual holding residual + delta and nothing
  // emitted; otherwise `*msg` and `*quanta` get the message and its decoded
  // quanta and the residual keeps what they do not carry. Device pointers,
  // `n` of each (the layout's parameter count).
  virtual absl::Status Encode(const float* delta, float* residual, size_t n, v1::Update* msg,
                              std::vector<int64_t>* quanta) = 0;
  // As codec::Codec's (the host codec's state, bit for bit: a checkpoint
  // moves between backends).
  virtual absl::StatusOr<codec::CodecState> State() const = 0;
  virtual absl::Status Restore(const codec::CodecState& state) = 0;
};

// Whether `options.codec` has a device encoder here (onebit, dyntree8).
bool HasDeviceCodec(const codec::CodecOptions& options);

// For options that MakeCodec accepts and HasDeviceCodec names, on `stream`
// of the current device. kInternal naming a CUDA call that failed.
absl::StatusOr<std::unique_ptr<DeviceCodec>> MakeDeviceCodec(const codec::CodecOptions& options,
                                                             cudaStream_t stream);

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_DEVICE_CODEC_H_
