#include "codec/update_message.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "codec/crc32c.h"
#include "codec/update_words.h"
#include "tests/test_util.h"

namespace reckon::codec {
namespace {

using ::reckon::testing::RandomUpdates;

TEST(Crc32c, KnownVectors) {
  // RFC 3720 B.4 and the classic check value.
  EXPECT_EQ(Crc32c(std::string_view("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(std::string_view("")), 0u);
}

TEST(Crc32c, HardwareAndPortableAgreeOnEveryLengthAndOffset) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  for (size_t off = 0; off < 9; ++off) {
    for (size_t len = 0; off + len <= data.size(); len += 13) {
      const uint32_t portable = Crc32cPortable(data.data() + off, len);
      EXPECT_EQ(Crc32c(data.data() + off, len), portable);
      if (Crc32cHardwareAvailable()) {
        EXPECT_EQ(Crc32cHardware(data.data() + off, len), portable);
      }
    }
  }
  // Incremental == one shot.
  EXPECT_EQ(Crc32c(data.data() + 100, 900, Crc32c(data.data(), 100)), Crc32c(data));
}

// Long buffers go through the hardware path's three interleaved streams
// (rounds of kCrc32cStreamBytes x 3, then the rest on one): every length
// around a round's edge, from any continuing crc, gives the portable bytes.
TEST(Crc32c, ThreeStreamsGiveOneStreamsCrcAtEveryRoundEdge) {
  const size_t round = 3 * kCrc32cStreamBytes;
  std::string data(4 * round + 64, '\0');
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (char& c : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  for (const size_t len : {round - 1, round, round + 1, round + 8, 2 * round - 3, 2 * round,
                           2 * round + 17, 4 * round, 4 * round + 63}) {
    for (const uint32_t from : {0u, 0xE3069283u}) {
      for (const size_t off : {size_t{0}, size_t{1}}) {
        const uint32_t portable = Crc32cPortable(data.data() + off, len, from);
        EXPECT_EQ(Crc32c(data.data() + off, len, from), portable) << len << " " << off;
        if (Crc32cHardwareAvailable()) {
          EXPECT_EQ(Crc32cHardware(data.data() + off, len, from), portable) << len << " " << off;
        }
      }
    }
  }
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::string data(n, '\0');
  uint64_t x = seed | 1;
  for (char& c : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  return data;
}

// The carry-less folds (AVX-512's: 256 bytes a round in sixteen lanes, then
// 64, then 16; the 32-byte registers': 256 bytes in sixteen lanes, then 16;
// the 16-byte registers': 128 bytes a round in eight lanes, then 16; all
// ending on the crc32 instruction): every length up to four
// rounds and their tails, at odd offsets, from a continuing crc, and a
// dense payload's size, give the portable bytes' CRC. Each fold the CPU
// can run; one it cannot is named.
TEST(Crc32c, FoldedGivesThePortableCrcAtEveryLengthAndOffset) {
  struct Fold {
    const char* name;
    bool available;
    uint32_t (*crc)(const void*, size_t, uint32_t);
  };
  const Fold folds[] = {{"AVX-512 VPCLMULQDQ", Crc32cFoldedAvailable(), Crc32cFolded},
                        {"VPCLMULQDQ with AVX2", Crc32cFolded256Available(), Crc32cFolded256},
                        {"PCLMULQDQ", Crc32cFolded128Available(), Crc32cFolded128}};
  int ran = 0;
  for (const Fold& fold : folds) {
    if (!fold.available) {
      std::printf("this CPU has no %s: that fold is not run\n", fold.name);
      continue;
    }
    ++ran;
    SCOPED_TRACE(fold.name);
    const std::string data = RandomBytes(4 * 256 + 200, 11);
    for (size_t len = 0; len + 3 <= data.size(); ++len) {
      for (const size_t off : {size_t{0}, size_t{3}}) {
        for (const uint32_t from : {0u, 0xE3069283u}) {
          ASSERT_EQ(fold.crc(data.data() + off, len, from),
                    Crc32cPortable(data.data() + off, len, from))
              << "length " << len << " offset " << off << " from " << from;
        }
      }
    }
    const std::string payload = RandomBytes(4 * 669706 + 1, 12);
    EXPECT_EQ(fold.crc(payload.data(), payload.size(), 0),
              Crc32cPortable(payload.data(), payload.size()));
  }
  if (ran == 0) {
    GTEST_SKIP() << "this CPU has no carry-less multiply: Crc32c uses the crc32 instruction's "
                    "three streams instead";
  }
  const std::string payload = RandomBytes(4 * 669706 + 1, 12);
  EXPECT_EQ(Crc32c(payload.data(), payload.size()), Crc32cPortable(payload.data(), payload.size()));
}

// crc(A B) from crc(A), crc(B) and |B| alone, at every split of a buffer
// (empty halves included) and for lengths with high bits set.
TEST(Crc32c, CombineGivesTheCrcOfTheConcatenation) {
  const std::string data = RandomBytes(3000, 5);
  for (size_t split = 0; split <= data.size(); split += (split < 40 ? 1 : 97)) {
    const std::string_view a(data.data(), split), b(data.data() + split, data.size() - split);
    EXPECT_EQ(Crc32cCombine(Crc32c(a), Crc32c(b), b.size()), Crc32c(data)) << split;
  }
  EXPECT_EQ(Crc32cCombine(0x12345678u, 0x9abcdef0u, 0), 0x12345678u ^ 0x9abcdef0u);
  const std::string big = RandomBytes((size_t{1} << 20) + 13, 6);
  EXPECT_EQ(
      Crc32cCombine(Crc32c(big.data(), 7), Crc32c(big.data() + 7, big.size() - 7), big.size() - 7),
      Crc32c(big));
}

// A ParallelFor that splits [0, n) into `pieces` uneven chunks and runs
// them last first: the combined CRC must not depend on the order or sizes.
ParallelFor UnevenChunksBackwards(size_t pieces) {
  return [pieces](size_t n, const std::function<void(size_t, size_t)>& fn) {
    std::vector<size_t> edges = {0};
    for (size_t i = 1; i < pieces; ++i) edges.push_back(n * i * i / (pieces * pieces));
    edges.push_back(n);
    for (size_t i = pieces; i > 0; --i) fn(edges[i - 1], edges[i]);
  };
}

TEST(Crc32c, OnThreadsGivesOneThreadsCrc) {
  for (const size_t n : {size_t{0}, size_t{100}, kCrc32cThreadedBytes - 1, kCrc32cThreadedBytes,
                         3 * kCrc32cThreadedBytes + 5}) {
    const std::string data = RandomBytes(n, n + 1);
    for (const size_t pieces : {1, 2, 3, 7}) {
      EXPECT_EQ(Crc32cOnThreads(data, UnevenChunksBackwards(pieces)), Crc32c(data))
          << n << " bytes in " << pieces;
    }
    EXPECT_EQ(Crc32cOnThreads(data, nullptr), Crc32c(data));
  }
  // A ParallelFor that leaves a range out still gives the bytes' CRC.
  const std::string data = RandomBytes(2 * kCrc32cThreadedBytes, 9);
  const ParallelFor drops_the_tail = [](size_t n, const std::function<void(size_t, size_t)>& fn) {
    fn(0, n / 2);
  };
  EXPECT_EQ(Crc32cOnThreads(data, drops_the_tail), Crc32c(data));
}

v1::Update Encoded(v1::Codec codec, uint64_t count = 300, uint64_t params = 100'000) {
  v1::Update msg;
  msg.mutable_origin()->set_node_id("w0");
  msg.mutable_origin()->set_incarnation(9);
  msg.set_seq(4);
  EXPECT_TRUE(
      EncodeThresholdUpdate(RandomUpdates(count, params, 3), 1 << 20, params, codec, &msg).ok());
  return msg;
}

TEST(UpdateMessage, RoundTripsThroughBytesForBothCodecs) {
  for (const v1::Codec codec : {v1::CODEC_THRESHOLD_RICE, v1::CODEC_THRESHOLD_PACKED32}) {
    const v1::Update msg = Encoded(codec);
    absl::StatusOr<v1::Update> parsed = ParseUpdate(msg.SerializeAsString());
    ASSERT_TRUE(parsed.ok());
    DecodedUpdate d;
    ASSERT_TRUE(DecodeUpdate(*parsed, &d).ok());
    EXPECT_EQ(d.words, RandomUpdates(300, 100'000, 3));
    EXPECT_EQ(d.node_id, "w0");
    EXPECT_EQ(d.incarnation, 9u);
    EXPECT_EQ(d.seq, 4u);
    EXPECT_EQ(d.step_quanta, 1 << 20);
    EXPECT_EQ(d.param_count, 100'000u);
    EXPECT_EQ(d.codec, codec);
  }
  // Rice is far smaller than packed32 at this density.
  EXPECT_LT(Encoded(v1::CODEC_THRESHOLD_RICE).payload().size() * 2,
            Encoded(v1::CODEC_THRESHOLD_PACKED32).payload().size());
}

void ExpectRejected(const v1::Update& msg, absl::StatusCode code) {
  DecodedUpdate d;
  d.words = {1, 2, 3};
  const absl::Status s = DecodeUpdate(msg, &d);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_TRUE(d.words.empty());
}

TEST(UpdateMessageRejects, CrcMismatch) {
  for (const v1::Codec codec : {v1::CODEC_THRESHOLD_RICE, v1::CODEC_THRESHOLD_PACKED32}) {
    v1::Update msg = Encoded(codec);
    (*msg.mutable_payload())[5] ^= 0x10;  // a flipped payload bit
    ExpectRejected(msg, absl::StatusCode::kDataLoss);
    msg = Encoded(codec);
    msg.set_crc32c(msg.crc32c() ^ 1);  // a flipped checksum bit
    ExpectRejected(msg, absl::StatusCode::kDataLoss);
  }
}

TEST(UpdateMessageRejects, StepQuantaNotPositive) {
  v1::Update msg = Encoded(v1::CODEC_THRESHOLD_RICE);
  msg.set_step_quanta(0);
  ExpectRejected(msg, absl::StatusCode::kDataLoss);
  msg.set_step_quanta(-3);
  ExpectRejected(msg, absl::StatusCode::kDataLoss);
}

TEST(UpdateMessageRejects, UnknownOrUnspecifiedCodec) {
  v1::Update msg = Encoded(v1::CODEC_THRESHOLD_RICE);
  msg.set_codec(static_cast<v1::Codec>(77));
  ExpectRejected(msg, absl::StatusCode::kDataLoss);
  msg.set_codec(v1::CODEC_UNSPECIFIED);
  ExpectRejected(msg, absl::StatusCode::kDataLoss);
  msg.set_codec(v1::CODEC_ONEBIT);  // a threshold payload is not a onebit one
  ExpectRejected(msg, absl::StatusCode::kDataLoss);
}

TEST(UpdateMessageRejects, KAbove30) {
  v1::Update msg = Encoded(v1::CODEC_THRESHOLD_RICE);
  msg.set_rice_k(31);
  ExpectRejected(msg, absl::StatusCode::kDataLoss);
}

TEST(UpdateMessageRejects, CountAboveParamCount) {
  v1::Update msg = Encoded(v1::CODEC_THRESHOLD_PACKED32, 10, 10);
  msg.set_count(11);
  ExpectRejected(msg, absl::StatusCode::kDataLoss);
}

TEST(UpdateMessageRejects, ParamCountAbove2To31) {
  v1::Update msg = Encoded(v1::CODEC_THRESHOLD_RICE);
  msg.set_param_count((uint64_t{1} << 31) + 1);
  ExpectRejected(msg, absl::StatusCode::kDataLoss);
}

TEST(UpdateMessageRejects, PayloadCountMismatch) {
  v1::Update msg = Encoded(v1::CODEC_THRESHOLD_RICE);
  msg.set_count(msg.count() - 1);  // bytes left after the padding
  ExpectRejected(msg, absl::StatusCode::kDataLoss);
}

TEST(UpdateMessageRejects, GarbageBytesAndOversizedMessages) {
  EXPECT_EQ(ParseUpdate("\xff\xff\xff\xff garbage").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseUpdate(std::string(100, 'x'), 50).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(UpdateMessage, EncoderRefusesBadInput) {
  v1::Update msg;
  const std::vector<uint32_t> unsorted = {PackUpdate(5, false), PackUpdate(2, false)};
  EXPECT_FALSE(EncodeThresholdUpdate(unsorted, 1, 10, v1::CODEC_THRESHOLD_RICE, &msg).ok());
  const std::vector<uint32_t> ok = {PackUpdate(1, false)};
  EXPECT_FALSE(EncodeThresholdUpdate(ok, 0, 10, v1::CODEC_THRESHOLD_RICE, &msg).ok());
  EXPECT_FALSE(EncodeThresholdUpdate(ok, 1, 1, v1::CODEC_THRESHOLD_RICE, &msg).ok());
  EXPECT_FALSE(EncodeThresholdUpdate(ok, 1, 10, v1::CODEC_DENSE_FP32, &msg).ok());
}

}  // namespace
}  // namespace reckon::codec
