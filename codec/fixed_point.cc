#include "codec/fixed_point.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/codec_payload.h"
#include "codec/elementwise.h"
#include "codec/sha256.h"
#include "codec/update_words.h"

namespace reckon::codec {

absl::StatusOr<ThresholdStep> MakeThresholdStep(double threshold, int fraction_bits) {
  if (fraction_bits < 0 || fraction_bits > kMaxFractionBits) {
    return absl::InvalidArgumentError(
        absl::StrCat("fraction bits ", fraction_bits, " outside [0, ", kMaxFractionBits, "]"));
  }
  if (!std::isfinite(threshold) || threshold <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("threshold ", threshold, " must be finite and positive"));
  }
  const double scaled = std::ldexp(threshold, fraction_bits);
  if (scaled >= 0x1p62) {
    return absl::InvalidArgumentError(absl::StrCat("threshold ", threshold, " is too large for ",
                                                   fraction_bits, " fraction bits"));
  }
  uint64_t quanta = static_cast<uint64_t>(std::llround(scaled));
  if (quanta == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("threshold ", threshold, " is below half a quantum (2^-", fraction_bits,
                     "); use more fraction bits or a larger threshold"));
  }
  // Keep at most 24 significant bits so that tau is exact as a float32.
  const int width = std::bit_width(quanta);
  if (width > 24) {
    const int drop = width - 24;
    quanta = ((quanta + (uint64_t{1} << (drop - 1))) >> drop) << drop;
  }
  ThresholdStep step;
  step.fraction_bits = fraction_bits;
  step.step_quanta = static_cast<int64_t>(quanta);
  step.tau = static_cast<float>(std::ldexp(static_cast<double>(quanta), -fraction_bits));
  return step;
}

uint64_t SplitMix64::Uniform(uint64_t bound) {
  if (bound == std::numeric_limits<uint64_t>::max()) return Next();
  const uint64_t range = bound + 1;
  // Reject the top partial copy of [0, range) so every value is equally likely.
  const uint64_t limit =
      std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % range;
  uint64_t x;
  do {
    x = Next();
  } while (x >= limit);
  return x % range;
}

FixedPointReplica::FixedPointReplica(uint64_t param_count, int fraction_bits, FloatCopy floats)
    : fraction_bits_(fraction_bits),
      quantum_(std::ldexp(1.0, -fraction_bits)),
      quanta_(param_count, 0),
      floats_(floats),
      weights_(floats == FloatCopy::kKept ? param_count : 0, 0.0f) {}

absl::StatusOr<FixedPointReplica> FixedPointReplica::Create(uint64_t param_count, int fraction_bits,
                                                            FloatCopy floats) {
  if (param_count > kMaxParamCount) {
    return absl::InvalidArgumentError(absl::StrCat("param_count ", param_count, " exceeds 2^31"));
  }
  if (fraction_bits < 0 || fraction_bits > kMaxFractionBits) {
    return absl::InvalidArgumentError(
        absl::StrCat("fraction bits ", fraction_bits, " outside [0, ", kMaxFractionBits, "]"));
  }
  return FixedPointReplica(param_count, fraction_bits, floats);
}

absl::Status FixedPointReplica::InitializeUniform(uint64_t seed, uint64_t stream, uint64_t begin,
                                                  uint64_t count, double limit) {
  if (begin > param_count() || count > param_count() - begin) {
    return absl::InvalidArgumentError(absl::StrCat("init range [", begin, ", ", begin + count,
                                                   ") outside ", param_count(), " parameters"));
  }
  if (!std::isfinite(limit) || limit < 0 || std::ldexp(limit, fraction_bits_) >= 0x1p62) {
    return absl::InvalidArgumentError(absl::StrCat("init limit ", limit, " out of range"));
  }
  // llround of an exact power-of-two scaling: the same integer everywhere.
  const int64_t limit_quanta = std::llround(std::ldexp(limit, fraction_bits_));
  // Mix the stream into the seed so tensors get independent sequences.
  SplitMix64 mixer(seed ^ (0xD1B54A32D192ED03ull * (stream + 1)));
  SplitMix64 rng(mixer.Next());
  for (uint64_t i = begin; i < begin + count; ++i) {
    const int64_t q =
        static_cast<int64_t>(rng.Uniform(2 * static_cast<uint64_t>(limit_quanta))) - limit_quanta;
    quanta_[i] = q;
    if (!weights_.empty()) weights_[i] = QuantaToFloat(q, quantum_);
  }
  return absl::OkStatus();
}

namespace {

// a + b modulo 2^64 (the replica's arithmetic: associative and commutative,
// so any order of the same additions gives the same quanta), and whether
// the signed sum left the int64 range.
// Branch-free (wrapped when both addends' signs differ from the sum's), so
// the dense apply's loop vectorizes.
inline bool WrappingAdd(int64_t a, int64_t b, int64_t* sum) {
  *sum = static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  return ((a ^ *sum) & (b ^ *sum)) < 0;
}

}  // namespace

absl::Status FixedPointReplica::Apply(int64_t step_quanta, std::span<const uint32_t> words,
                                      Prefetch prefetch, const ParallelFor& parallel_for) {
  if (step_quanta <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("step_quanta ", step_quanta, " must be > 0"));
  }
  const uint64_t n = param_count();
  // Pass 1: validate everything; nothing changes if any word is bad.
  uint64_t next = 0;
  for (size_t i = 0; i < words.size(); ++i) {
    const uint32_t index = UpdateIndex(words[i]);
    if (index < next || index >= n) [[unlikely]] {
      return absl::InvalidArgumentError(absl::StrCat(
          "update ", i, " has index ", index,
          index >= n ? absl::StrCat(" >= param_count ", n) : std::string(" out of order")));
    }
    next = uint64_t{index} + 1;
  }
  // Pass 2: apply, modulo 2^64. (-step_quanta cannot overflow: step > 0.)
  // Each update is a cache miss (and a TLB miss) in arrays of 100s of MB:
  // the parameters kAhead updates on are prefetched so that the misses
  // overlap (32: measured best of 16/32 on this VM). Words [begin, end)
  // touch parameters no other run of words does (pass 1: strictly
  // ascending), so stripes need no lock.
  constexpr size_t kAhead = 32;
  int64_t* quanta = quanta_.data();
  float* weights = weights_.data();
  const bool floats = floats_ == FloatCopy::kKept;
  const double quantum = quantum_;
  std::atomic<uint64_t> wrapped{0};
  auto stripe = [&](size_t begin, size_t end) {
    const size_t prefetched = prefetch == Prefetch::kOn && end - begin > kAhead ? end - kAhead : 0;
    uint64_t local = 0;
    for (size_t i = begin; i < end; ++i) {
      if (i < prefetched) {
        const uint32_t ahead = UpdateIndex(words[i + kAhead]);
        __builtin_prefetch(quanta + ahead, /*rw=*/1);
        if (floats) __builtin_prefetch(weights + ahead, /*rw=*/1);
      }
      const uint32_t w = words[i];
      const uint32_t index = UpdateIndex(w);
      int64_t q;
      local += WrappingAdd(quanta[index], UpdateIsNegative(w) ? -step_quanta : step_quanta, &q);
      quanta[index] = q;
      if (floats) weights[index] = QuantaToFloat(q, quantum);
    }
    if (local != 0) wrapped.fetch_add(local, std::memory_order_relaxed);
  };
  ForChunks(parallel_for, words.size(), stripe);
  wrapped_ += wrapped.load(std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status FixedPointReplica::CheckDenseUpdateBytes(const char* first, size_t bytes,
                                                      size_t value_bytes) const {
  if (bytes != value_bytes * quanta_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("dense update has ", bytes, " bytes (",
                                                   value_bytes, " a value), replica needs ",
                                                   value_bytes * quanta_.size()));
  }
  const char* own = reinterpret_cast<const char*>(quanta_.data());
  if (first < own + quanta_.size() * sizeof(int64_t) && own < first + bytes) {
    return absl::InvalidArgumentError("a dense update in the replica's own quanta");
  }
  return absl::OkStatus();
}

absl::Status FixedPointReplica::ApplyDense(QuantaSpan delta, const ParallelFor& parallel_for) {
  const size_t value_bytes = delta.is_dense_fp32() ? 4 : sizeof(int64_t);
  RECKON_RETURN_IF_ERROR(CheckDenseUpdateBytes(delta.is_dense_fp32()
                                                   ? delta.dense_fp32_bytes()
                                                   : reinterpret_cast<const char*>(delta.int64s()),
                                               delta.size() * value_bytes, value_bytes));
  int64_t* quanta = quanta_.data();
  float* weights = weights_.data();
  const double quantum = quantum_;
  std::atomic<uint64_t> wrapped{0};
  const bool floats = floats_ == FloatCopy::kKept;
  // One vectorized pass (elementwise.h): the sum, and the float copy from
  // it in the same loop where one is kept.
  auto add = [&](size_t begin, size_t end) {
    const FloatCopyOut copy{floats ? weights + begin : nullptr, quantum};
    const size_t len = end - begin;
    const uint64_t local =
        delta.is_dense_fp32()
            ? AddDenseFp32Wrapping(quanta + begin, delta.dense_fp32_bytes() + 4 * begin, len, copy)
            : AddQuantaWrapping(quanta + begin, delta.int64s() + begin, len, copy);
    if (local != 0) wrapped.fetch_add(local, std::memory_order_relaxed);
  };
  const size_t n = quanta_.size();
  ForChunks(parallel_for, n, add);
  wrapped_ += wrapped.load();
  return absl::OkStatus();
}

absl::Status FixedPointReplica::ApplyCheckedDenseFp32(std::string_view payload, uint32_t crc,
                                                      const ParallelFor& parallel_for) {
  RECKON_RETURN_IF_ERROR(CheckDenseUpdateBytes(payload.data(), payload.size(), 4));
  int64_t* quanta = quanta_.data();
  float* weights = floats_ == FloatCopy::kKept ? weights_.data() : nullptr;
  const double quantum = quantum_;
  std::atomic<uint64_t> wrapped{0};
  payload::DenseFp32BlockSink add;
  // Each checked block summed while it is in the L1 cache (ApplyDense's
  // pass, block by block).
  add.take = [&](size_t first, size_t len, const char* at) {
    const FloatCopyOut copy{weights != nullptr ? weights + first : nullptr, quantum};
    const uint64_t local = AddDenseFp32Wrapping(quanta + first, at, len, copy);
    if (local != 0) wrapped.fetch_add(local, std::memory_order_relaxed);
  };
  // A failed check's undo, one thread, never on a good message's path: the
  // wrapping difference is exactly the quanta before, and a difference
  // leaves the int64 range exactly when its sum did, so the count of wraps
  // is undone too; the float copy is a function of the quanta.
  add.give_back = [&](size_t first, size_t len) {
    for (size_t i = first; i < first + len; ++i) {
      float value;
      std::memcpy(&value, payload.data() + 4 * i, 4);
      int64_t delta = 0;
      PayloadValueToQuanta(value, &delta);  // a block taken: every value is one
      int64_t before;
      if (__builtin_sub_overflow(quanta[i], delta, &before)) {
        wrapped.fetch_sub(1, std::memory_order_relaxed);
      }
      quanta[i] = before;
    }
    if (weights != nullptr) QuantaToFloats(quanta + first, len, quantum, weights + first);
  };
  RECKON_RETURN_IF_ERROR(payload::CheckDenseFp32Payload(payload, crc, add, parallel_for));
  wrapped_ += wrapped.load();
  return absl::OkStatus();
}

absl::Status FixedPointReplica::Load(std::span<const int64_t> quanta) {
  if (quanta.size() != quanta_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("loading ", quanta.size(), " parameters into a replica of ", quanta_.size()));
  }
  std::copy(quanta.begin(), quanta.end(), quanta_.begin());
  QuantaToFloats(quanta_.data(), weights_.size(), quantum_, weights_.data());
  return absl::OkStatus();
}

std::string WeightHashOf(std::span<const int64_t> quanta) {
  Sha256 hash;
  if constexpr (std::endian::native == std::endian::little) {
    hash.Update(quanta.data(), quanta.size() * sizeof(int64_t));
  } else {
    for (const int64_t q : quanta) {
      const uint64_t le = __builtin_bswap64(static_cast<uint64_t>(q));
      hash.Update(&le, sizeof(le));
    }
  }
  return ToHex(hash.Finish());
}

std::string FixedPointReplica::WeightHash() const { return WeightHashOf(quanta_); }

}  // namespace reckon::codec
