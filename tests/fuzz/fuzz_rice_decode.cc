// libFuzzer target: the fast Rice decoder against the bit-by-bit reference
// (tests/reference_codec.cc) on arbitrary headers and payloads, its two-chain
// rounds against its one chain, and the encoder in a round trip. Any
// disagreement or crash aborts.
#include <cstdlib>
#include <vector>

#include "codec/rice.h"
#include "codec/update_words.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/reference_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reckon::fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.Take<uint8_t>();
  const uint32_t k = mode & 31;  // 31 is invalid on purpose
  // param_count up to 2^31 (and just above, to test the check).
  uint64_t param_count = in.Take<uint32_t>();
  if (mode & 0x20) param_count = (uint64_t{1} << 31) + (mode & 0x40 ? 1 : 0);
  const uint64_t count =
      in.Take<uint16_t>() | (mode & 0x80 ? uint64_t{in.Take<uint16_t>()} << 16 : 0);
  const std::string_view payload = in.Rest();

  std::vector<uint32_t> fast;
  const absl::Status status = reckon::codec::DecodeRice(payload, count, k, param_count, &fast);
  const auto reference = reckon::testing::ReferenceDecodeRice(payload, count, k, param_count);
  if (status.ok() != reference.has_value()) std::abort();
  if (status.ok() && fast != *reference) std::abort();
  if (!status.ok() && (!fast.empty() || status.code() != absl::StatusCode::kDataLoss)) std::abort();

  // The two-chain rounds (rice.h), in rounds of a few codes so that small
  // inputs are many rounds: the same words, the same refusal.
  for (const reckon::codec::RiceDecodeTuning tuning :
       {reckon::codec::RiceDecodeTuning{0, reckon::codec::Isa::kPortable},
        reckon::codec::RiceDecodeTuning{4, reckon::codec::Isa::kBest},
        reckon::codec::RiceDecodeTuning{4, reckon::codec::Isa::kAvx2},
        reckon::codec::RiceDecodeTuning{4, reckon::codec::Isa::kPortable},
        reckon::codec::RiceDecodeTuning{9, reckon::codec::Isa::kBest}}) {
    std::vector<uint32_t> again;
    const absl::Status s =
        reckon::codec::DecodeRice(payload, count, k, param_count, &again, tuning);
    if (s != status || again != fast) std::abort();
  }

  if (status.ok()) {
    // Whatever decodes must re-encode to the same bytes with the same k.
    std::string again;
    reckon::codec::EncodeRice(fast, k, &again);
    if (again != payload) std::abort();
    if (!reckon::codec::ValidateUpdateWords(fast, param_count).ok()) std::abort();
  }
  return 0;
}
