// Golomb-Rice coded gaps (docs/wire.md §3.2). For update i, gap = index_i -
// index_{i-1} - 1 (index_{-1} = -1); the quotient gap >> k is written in
// unary (q zero bits, then a one), then the k low bits of gap, then the sign
// bit, all least-significant-bit first; the stream is zero-padded to a byte.
//
// Threads: functions, any thread. Errors: a stream docs/wire.md refuses
// (ends early, an index past the model, bits after the padding) is
// kDataLoss, named (DecodeRice).
#ifndef RECKON_CODEC_RICE_H_
#define RECKON_CODEC_RICE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "codec/elementwise.h"

namespace reckon::codec {

inline constexpr uint32_t kMaxRiceK = 30;

// Exact size in bits of `words` Rice coded with parameter `k` (before the
// padding to a whole byte). REQUIRES: words strictly ascending by index.
uint64_t RiceEncodedBits(std::span<const uint32_t> words, uint32_t k);

// The k in [0, 30] that minimizes RiceEncodedBits (hence the payload size);
// the smallest such k on ties. Cost: two or three linear passes.
// Why this is exact: bits(k+1) - bits(k) = count - sum(ceil((gap >> k) / 2)),
// which never decreases as k grows, so bits(k) is convex in k and the first k
// where that difference is >= 0 is the minimum.
uint32_t OptimalRiceK(std::span<const uint32_t> words);

// Replaces `*payload` with `words` Rice coded with parameter `k`.
// REQUIRES: k <= 30; words strictly ascending by index (ValidateUpdateWords).
void EncodeRice(std::span<const uint32_t> words, uint32_t k, std::string* payload);

// How DecodeRice splits its work (the defaults everywhere but the tests and
// benches that compare the paths).
struct RiceDecodeTuning {
  // Codes the first chain decodes in a round (about); 0: one chain only.
  uint32_t round_codes = 1024;
  // The copy of the indices' sums (elementwise.h's Isa): kBest, AVX-512
  // where the CPU has it, else AVX2, else no rounds (portable sums cost
  // more than the second chain saves); kAvx2, the AVX2 copy where the CPU
  // has AVX2; kPortable, the portable sums (the tests').
  Isa indices = Isa::kBest;
};

// Decodes `count` updates into `*words` (replaced). Returns kDataLoss, leaving
// `*words` empty, on any of docs/wire.md §3.2's rejections: k > 30, count >
// param_count, param_count > 2^31, an index >= param_count, a stream that
// ends before `count` updates, non-zero padding bits, bytes after the padding.
// (The CRC is the message layer's job: update_message.h.)
// Time and memory are bounded by the payload size, whatever the header says.
//
// How (not what): a message of more than a few hundred codes is decoded in
// rounds of two chains at once (docs/architecture.md "The receive path"):
// the first from where the last round ended, the second from a bit a round
// further on, guessed to be a code's start. A Rice stream resynchronizes: a
// walk from a wrong bit meets the true codes' stop bits within a few codes,
// and from a shared stop bit on the two walks are the same. The first chain
// walks on until it meets the second's stop bits; from there the second's
// codes are the true ones. The core overlaps the two chains' serial work (a
// count of zeros and two shifts a code), and the indices are summed with
// AVX-512 (1.5x the one chain's words a second on a Zen 5 core; one
// chain where the CPU lacks AVX-512 or BMI2). A round whose chains never meet,
// or that finds anything wrong, is decoded again one code at a time from its
// start, so the result and every refusal are the one-chain decoder's.
// (`tuning`: the tests and benches that compare the paths.)
absl::Status DecodeRice(std::string_view payload, uint64_t count, uint32_t k, uint64_t param_count,
                        std::vector<uint32_t>* words, const RiceDecodeTuning& tuning = {});

}  // namespace reckon::codec

#endif  // RECKON_CODEC_RICE_H_
