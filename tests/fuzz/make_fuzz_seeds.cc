// Writes seed inputs for the fuzz targets: valid messages and payloads, so
// that mutation starts from inputs that pass the CRC and the header checks
// and reaches the decoders' deep paths. Usage: make_fuzz_seeds TARGET DIR.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "codec/codec.h"
#include "codec/packed32.h"
#include "codec/rice.h"
#include "codec/update_message.h"
#include "tests/test_util.h"

namespace {

void Put(const std::string& dir, int n, const std::string& bytes) {
  std::ofstream(dir + "/seed_" + std::to_string(n), std::ios::binary) << bytes;
}

template <typename T>
std::string Le(T v) {
  std::string s(sizeof(T), '\0');
  std::memcpy(s.data(), &v, sizeof(T));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_fuzz_seeds TARGET DIR\n");
    return 2;
  }
  const std::string target = argv[1], dir = argv[2];
  int n = 0;
  for (const uint64_t count : {0, 1, 3, 17, 200}) {
    for (const uint64_t params : {64, 1000, 70000}) {
      if (count > params) continue;
      const auto words = reckon::testing::RandomUpdates(count, params, count * 31 + params);
      if (target == "fuzz_update_parse") {
        for (const auto codec :
             {reckon::v1::CODEC_THRESHOLD_RICE, reckon::v1::CODEC_THRESHOLD_PACKED32}) {
          reckon::v1::Update msg;
          msg.mutable_origin()->set_node_id("seed");
          msg.set_seq(n + 1);
          if (!reckon::codec::EncodeThresholdUpdate(words, 4096, params, codec, &msg).ok())
            return 1;
          Put(dir, n++, msg.SerializeAsString());
        }
      } else if (target == "fuzz_rice_decode") {
        const uint32_t k = reckon::codec::OptimalRiceK(words);
        std::string payload;
        reckon::codec::EncodeRice(words, k, &payload);
        // mode byte: k in the low 5 bits, 0x80 = 32-bit count.
        Put(dir, n++,
            std::string(1, static_cast<char>(k | 0x80)) + Le<uint32_t>(params) +
                Le<uint32_t>(static_cast<uint32_t>(count)) + payload);
      } else if (target == "fuzz_packed32_decode") {
        std::string payload;
        reckon::codec::EncodePacked32(words, &payload);
        Put(dir, n++,
            std::string(1, '\0') + Le<uint32_t>(params) +
                Le<uint32_t>(static_cast<uint32_t>(count)) + payload);
      } else if (target != "fuzz_quanta_decode") {
        std::fprintf(stderr, "make_fuzz_seeds: unknown target %s\n", target.c_str());
        return 2;
      }
    }
  }
  // The quanta codecs (docs/wire-codecs.md): whole messages for fuzz_update_parse,
  // mode byte + param_count + payload for fuzz_quanta_decode.
  if (target == "fuzz_update_parse" || target == "fuzz_quanta_decode") {
    const reckon::codec::TensorLayout layouts[] = {
        {{3, 5}, {3, 1}}, {{16, 20}, {16, 1}, {3, 16}, {3, 1}}, {{1, 9}}};
    for (const auto& layout : layouts) {
      for (const auto codec :
           {reckon::v1::CODEC_ONEBIT, reckon::v1::CODEC_DYNTREE8, reckon::v1::CODEC_DENSE_FP32}) {
        reckon::codec::CodecOptions options;
        options.codec = codec;
        options.layout = layout;
        auto made = reckon::codec::MakeCodec(options);
        if (!made.ok()) return 1;
        const uint64_t params = reckon::codec::LayoutParamCount(layout);
        std::vector<float> values(params);
        for (uint64_t i = 0; i < params; ++i) values[i] = float((i * 37) % 11) * 1e-3f - 5e-3f;
        reckon::v1::Update msg;
        std::vector<int64_t> quanta;
        if (!(*made)->Encode(values, &msg, &quanta).ok()) return 1;
        if (target == "fuzz_update_parse") {
          msg.mutable_origin()->set_node_id("seed");
          msg.set_seq(n + 1);
          Put(dir, n++, msg.SerializeAsString());
        } else {
          // mode: codec - 3 in the low two bits, no shift of param_count.
          Put(dir, n++,
              std::string(1, static_cast<char>(codec - 3)) + Le<uint32_t>(uint32_t(params)) +
                  msg.payload());
        }
      }
    }
  }
  std::printf("make_fuzz_seeds: %d seeds for %s in %s\n", n, target.c_str(), dir.c_str());
  return 0;
}
