// The flat replica (model/flat_replica.h) on a GPU, for a framework whose
// parameters are in that GPU's memory (reckon for PyTorch with CUDA
// tensors, issue 36): the fixed-point replica (cuda/device_replica.h), the
// residual and a scratch delta in device memory, Strom's threshold pass as
// the CUDA backend runs it (cuda/threshold_pass.h). A step moves its
// emitted words (4 bytes each) and 16 bytes of counters to the host, the
// peers' messages' words to the device, and nothing of the parameters:
//
//   Emit:      delta = params - replica; the first non-finite parameter
//              (8 bytes back, one wait: a NaN is refused before the
//              residual takes anything); residual += delta and the pass,
//              bit for bit the host's (model::MakeHostFlatReplica)
//   ApplyOwnEmission: from where the pass left the words
//   WriteInto: params = the replica's floats, device to device
//
// The replica's work runs on a stream of its own, after the framework's
// (OrderAfter: an event recorded on the framework's stream). Every call
// makes the replica's device current and puts the caller's back, so the
// framework's idea of the current device is left alone.
//
// Threading: one thread (model/flat_replica.h). Host C++20.
#ifndef RECKON_CUDA_CUDA_FLAT_REPLICA_H_
#define RECKON_CUDA_CUDA_FLAT_REPLICA_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "model/flat_replica.h"

namespace reckon::cuda {

// On the CUDA device `device` (an ordinal, as torch's cuda:N). kUnavailable
// (the driver's words) when there is no such device; kInvalidArgument for
// more than 2^31 - 1 parameters (the threshold pass's limit) or fraction
// bits outside [0, 62]; kInternal for CUDA failures, naming the call.
absl::StatusOr<std::unique_ptr<model::FlatReplica>> MakeCudaFlatReplica(uint64_t param_count,
                                                                        int fraction_bits,
                                                                        int device);

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_CUDA_FLAT_REPLICA_H_
