// libFuzzer target: the onebit, dyntree8 and dense fp32 payload decoders
// (docs/wire-codecs.md) against the reference decoder written from the spec. They
// must agree on acceptance and on every decoded value; whatever is accepted
// must apply to a replica.
#include <cstdlib>
#include <vector>

#include "codec/codec.h"
#include "codec/fixed_point.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/reference_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  reckon::fuzz::FuzzInput in(data, size);
  const uint8_t mode = in.Take<uint8_t>();
  const int codec = 3 + mode % 3;  // onebit, dyntree8, dense
  uint64_t param_count = in.Take<uint32_t>() >> ((mode >> 2) & 31);  // small counts are common
  if (mode & 0x80) param_count = (uint64_t{1} << 31) + 1;
  reckon::v1::Update msg;
  msg.set_codec(static_cast<reckon::v1::Codec>(codec));
  msg.set_param_count(param_count);
  msg.set_payload(std::string(in.Rest()));

  std::vector<int64_t> fast;
  const absl::Status status = reckon::codec::DecodeQuantaPayload(msg, &fast);
  const auto reference =
      reckon::testing::ReferenceDecodeQuanta(codec, msg.payload(), param_count);
  if (status.ok() != reference.has_value()) std::abort();
  if (!status.ok()) {
    if (!fast.empty() || status.code() != absl::StatusCode::kDataLoss) std::abort();
    return 0;
  }
  if (fast != *reference || fast.size() != param_count) std::abort();
  auto replica = reckon::codec::FixedPointReplica::Create(param_count, 32);
  if (!replica.ok() || !replica->ApplyDense(fast).ok()) std::abort();
  return 0;
}
