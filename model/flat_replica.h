// A replica beside a framework's own parameters (reckon for PyTorch, issue
// 36; python/flat_peer.h drives it): the cluster's fixed-point replica of a
// flat float32 vector, the residual of what this peer's framework changed,
// and the replica's load, read, hash and apply (replica.h). It does not
// train: the forward and backward passes and the optimizer are the
// framework's.
//
// Where the memory is depends on the implementation: MakeHostFlatReplica
// keeps everything in host memory and takes host parameters;
// cuda/cuda_flat_replica.h keeps the replica and residual on a GPU and takes the
// framework's parameters in that GPU's memory (a `std::span<float>` there
// is a device pointer and a count: never read on the host).
//
// Threads: one thread calls every method (the framework's training loop;
// the gossip's applies happen there too, at its step boundary).
#ifndef RECKON_MODEL_FLAT_REPLICA_H_
#define RECKON_MODEL_FLAT_REPLICA_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codec/fixed_point.h"
#include "model/replica.h"

namespace reckon::model {

class FlatReplica : public Replica {
 public:
  // After the framework's optimizer step: residual += params - replica
  // (float32, in that order: the same bits on every implementation), then
  // `*words` = the +-tau steps the residual crossed (codec::QuantizeResidual,
  // which the residual keeps the rest of). The replica is not moved: the
  // caller applies the words (ApplyOwnEmission) once it has published them.
  // All or nothing: a parameter that is NaN or Inf is kInvalidArgument
  // naming the first ("parameter 3 is nan ..."), with the residual as it was
  // and no words. REQUIRES params.size() == param_count().
  virtual absl::Status Emit(std::span<const float> params, const codec::ThresholdStep& step,
                            std::vector<uint32_t>* words) = 0;
  // params = the replica's float32 weights. REQUIRES params.size() ==
  // param_count().
  virtual absl::Status WriteInto(std::span<float> params) = 0;
  // Work the framework enqueued before this call on its stream `stream`
  // (a cudaStream_t as an integer: the optimizer's step) comes before this
  // replica's next read of the parameters. Host memory has no streams: a
  // no-op there. The writes (WriteInto) are done when it returns.
  virtual absl::Status OrderAfter(uintptr_t stream) = 0;
  virtual uint64_t param_count() const = 0;

  // The residual: the framework's change not yet sent (param_count floats).
  virtual absl::StatusOr<std::vector<float>> ReadResidual() const = 0;
};

// In host memory (codec::FixedPointReplica with its float copy kept).
// kInvalidArgument for 0 parameters or fraction bits outside [0, 62].
absl::StatusOr<std::unique_ptr<FlatReplica>> MakeHostFlatReplica(uint64_t param_count,
                                                                 int fraction_bits);

// The error Emit returns for the first parameter that is not finite: the
// same words from every implementation.
absl::Status NonFiniteParameterError(uint64_t index, float value);

}  // namespace reckon::model

#endif  // RECKON_MODEL_FLAT_REPLICA_H_
