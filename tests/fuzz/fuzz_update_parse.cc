// libFuzzer target: arbitrary bytes as a serialized Update, through parsing,
// full validation and apply to a replica, for every codec. Must never crash; whatever is
// accepted must be applicable and re-encode to a message that decodes alike.
#include <cstdlib>
#include <vector>

#include "codec/codec.h"
#include "codec/fixed_point.h"
#include "codec/update_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<reckon::v1::Update> msg =
      reckon::codec::ParseUpdate({reinterpret_cast<const char*>(data), size}, 1 << 20);
  if (!msg.ok()) return 0;
  reckon::codec::DecodedUpdate decoded;
  if (!reckon::codec::DecodeUpdate(*msg, &decoded).ok()) {
    if (!decoded.words.empty() || !decoded.quanta.empty() || !decoded.dense_fp32.empty()) {
      std::abort();
    }
    return 0;
  }
  // Apply to a replica of the declared size, when that is small enough here.
  if (decoded.param_count <= (1u << 16)) {
    auto replica = reckon::codec::FixedPointReplica::Create(decoded.param_count, 32);
    if (!replica.ok()) std::abort();
    if (!reckon::codec::ApplyDecoded(decoded, &*replica).ok()) std::abort();
  }
  // The quanta codecs: decoding gave one value per parameter, the same as
  // the payload decoder's int64 expansion; the threshold codecs re-encode
  // below.
  if (decoded.dense()) {
    const reckon::codec::QuantaSpan quanta = decoded.decoded_quanta();
    if (quanta.size() != decoded.param_count || !decoded.words.empty()) std::abort();
    std::vector<int64_t> expanded;
    if (!reckon::codec::DecodeQuantaPayload(*msg, &expanded).ok()) std::abort();
    if (expanded != quanta.ToVector()) std::abort();
    return 0;
  }
  reckon::v1::Update again;
  if (!reckon::codec::EncodeThresholdUpdate(decoded.words, decoded.step_quanta, decoded.param_count,
                                            decoded.codec, &again)
           .ok()) {
    std::abort();
  }
  reckon::codec::DecodedUpdate twice;
  if (!reckon::codec::DecodeUpdate(again, &twice).ok() || twice.words != decoded.words)
    std::abort();
  return 0;
}
