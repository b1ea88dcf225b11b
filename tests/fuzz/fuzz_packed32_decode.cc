// libFuzzer target: the packed32 decoder against the reference decoder.
#include <cstdlib>
#include <vector>

#include "codec/packed32.h"
#include "codec/rice.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/reference_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reckon::fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.Take<uint8_t>();
  uint64_t param_count = in.Take<uint32_t>();
  if (mode & 1) param_count = (uint64_t{1} << 31) + (mode & 2 ? 1 : 0);
  const uint64_t count = in.Take<uint32_t>() >> (mode >> 3);  // small counts are common
  const std::string_view payload = in.Rest();

  std::vector<uint32_t> fast;
  const absl::Status status = reckon::codec::DecodePacked32(payload, count, param_count, &fast);
  const auto reference = reckon::testing::ReferenceDecodePacked32(payload, count, param_count);
  if (status.ok() != reference.has_value()) std::abort();
  if (status.ok() && fast != *reference) std::abort();
  if (!status.ok() && !fast.empty()) std::abort();
  if (status.ok()) {
    // Valid packed32 must survive a trip through Rice at the optimal k.
    std::string rice;
    const uint32_t k = reckon::codec::OptimalRiceK(fast);
    reckon::codec::EncodeRice(fast, k, &rice);
    std::vector<uint32_t> back;
    if (!reckon::codec::DecodeRice(rice, fast.size(), k, param_count, &back).ok()) std::abort();
    if (back != fast) std::abort();
  }
  return 0;
}
