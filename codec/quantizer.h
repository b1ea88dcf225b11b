// Strom's threshold quantizer with residual (docs/design.md step 5).
//
// Threads: functions over the spans given, any thread. Errors: a NaN or Inf
// in the residual, sizes that differ or a step that cannot be are
// kInvalidArgument, named, with nothing changed.
#ifndef RECKON_CODEC_QUANTIZER_H_
#define RECKON_CODEC_QUANTIZER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "codec/fixed_point.h"

namespace reckon::codec {

// For every element of `residual`: if R_i >= tau, emit (i, +) and R_i -= tau;
// else if R_i <= -tau, emit (i, -) and R_i += tau. `*words` is replaced by the
// emitted updates, ascending by index (update_words.h).
//
// The subtraction is the float32 operation R_i - tau with tau exactly
// step.step_quanta quanta; for |R_i| <= 2 tau (the usual case) it is exact
// (Sterbenz), so the residual loses exactly what peers gain.
//
// All or nothing: a NaN or Inf anywhere in `residual` returns
// kInvalidArgument naming the first such index, with `residual` unchanged
// and `*words` empty; it is never sent. kInvalidArgument too when the
// residual has more than 2^31 elements or the step is not positive.
// Cost: one streaming read of the residual, plus a write per emitted element.
absl::Status QuantizeResidual(std::span<float> residual, const ThresholdStep& step,
                              std::vector<uint32_t>* words);

// residual += params - replica, element by element in float32 (the bits of
// that loop), then QuantizeResidual, in one streaming pass: each chunk of
// sums is thresholded while it is in cache. For a framework's peer
// (model/flat_replica.h), whose step is its parameters' difference from the
// replica. The same words and residual as the add and QuantizeResidual one
// after the other; a NaN or Inf sum returns QuantizeResidual's error with
// nothing emitted and the residual holding every sum (as after the add
// alone). kInvalidArgument for unequal sizes.
absl::Status AddDifferenceAndQuantize(std::span<float> residual, std::span<const float> params,
                                      std::span<const float> replica, const ThresholdStep& step,
                                      std::vector<uint32_t>* words);

// The lowest index of `values` that is NaN or Inf, or values.size() when
// none: a branch-free scan, chunk by chunk, that vectorizes.
size_t FirstNonFinite(std::span<const float> values);

}  // namespace reckon::codec

#endif  // RECKON_CODEC_QUANTIZER_H_
