// The quanta codecs (codec/codec.h, docs/wire-codecs.md): onebit, dyntree8 and
// dense fp32. Encoding gives exactly what decoding gives; the decoders agree
// with the reference decoder written from the spec on valid and corrupted
// payloads; every rejection the spec lists is made; error feedback keeps
// exactly what the message did not carry.
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "codec/codec_payload.h"
#include "codec/crc32c.h"
#include "codec/elementwise.h"
#include "codec/update_message.h"
#include "gtest/gtest.h"
#include "tests/reference_codec.h"

namespace reckon::codec {
namespace {

constexpr v1::Codec kQuantaCodecs[] = {v1::CODEC_ONEBIT, v1::CODEC_DYNTREE8, v1::CODEC_DENSE_FP32};

// Every copy of an elementwise pass: kAvx2 runs the AVX2 copy on a CPU with
// AVX2, whether or not it has AVX-512 (kBest's there); where a function has
// no AVX2 copy, or the CPU no AVX2, it is the portable copy again.
constexpr Isa kEveryCopy[] = {Isa::kPortable, Isa::kAvx2, Isa::kBest};

// A small model's layout: 20-16-3 (W1 16x20, b1 16x1, W2 3x16, b2 3x1).
TensorLayout SmallLayout() { return {{16, 20}, {16, 1}, {3, 16}, {3, 1}}; }

std::vector<float> Gaussian(size_t n, double sigma, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng));
  return v;
}

CodecOptions Options(v1::Codec codec, TensorLayout layout = SmallLayout()) {
  CodecOptions o;
  o.codec = codec;
  o.layout = std::move(layout);
  o.fraction_bits = 32;
  return o;
}

// A ParallelFor of three threads, each a third of the range.
void ThreeThreads(size_t n, const std::function<void(size_t, size_t)>& fn) {
  std::vector<std::thread> chunks;
  for (size_t k = 0; k < 3; ++k) chunks.emplace_back(fn, n * k / 3, n * (k + 1) / 3);
  for (std::thread& t : chunks) t.join();
}

struct Encoded {
  v1::Update msg;
  std::vector<int64_t> quanta;  // the decoded form as int64 (EmittedQuanta's)
};

Encoded EncodeOnce(const CodecOptions& options, const std::vector<float>& values) {
  Encoded e;
  auto codec = MakeCodec(options);
  EXPECT_TRUE(codec.ok()) << codec.status();
  std::vector<int64_t> written = {1, 2, 3};  // a previous emission's, overwritten or cleared
  EXPECT_TRUE((*codec)->Encode(values, &e.msg, &written).ok());
  // The dense codec's payload is its decoded form: it writes no quanta.
  EXPECT_EQ(written.empty(), options.codec == v1::CODEC_DENSE_FP32);
  e.quanta = EmittedQuanta(e.msg, written).ToVector();
  return e;
}

TEST(QuantaCodec, DecodingGivesExactlyWhatTheEncoderComputed) {
  const TensorLayout layout = SmallLayout();
  const std::vector<float> values = Gaussian(LayoutParamCount(layout), 0.01, 1);
  for (const v1::Codec c : kQuantaCodecs) {
    SCOPED_TRACE(v1::Codec_Name(c));
    const Encoded e = EncodeOnce(Options(c), values);
    EXPECT_EQ(e.msg.codec(), c);
    EXPECT_EQ(e.msg.count(), values.size());
    EXPECT_EQ(e.msg.param_count(), values.size());
    EXPECT_EQ(e.msg.step_quanta(), 0);
    DecodedUpdate d;
    ASSERT_TRUE(DecodeUpdate(e.msg, &d).ok());
    EXPECT_TRUE(d.dense());
    EXPECT_TRUE(d.words.empty());
    EXPECT_EQ(d.decoded_quanta().ToVector(), e.quanta);
    // A dense message is its own decoded form: its checked payload, no
    // int64 copy.
    EXPECT_EQ(d.decoded_quanta().is_dense_fp32(), c == v1::CODEC_DENSE_FP32);
    EXPECT_EQ(d.quanta.empty(), c == v1::CODEC_DENSE_FP32);
    if (c == v1::CODEC_DENSE_FP32) {
      EXPECT_EQ(d.dense_fp32, e.msg.payload());
    }
    const auto ref = testing::ReferenceDecodeQuanta(c, e.msg.payload(), values.size());
    ASSERT_TRUE(ref.has_value());
    EXPECT_EQ(*ref, e.quanta);
    // Quanta approximate the values: dense to float32 precision, the others
    // with the codec's error, but never with the wrong sign when large.
    const double quantum = std::ldexp(1.0, -32);
    for (size_t i = 0; i < values.size(); ++i) {
      const double decoded = double(e.quanta[i]) * quantum;
      if (c == v1::CODEC_DENSE_FP32) {
        EXPECT_NEAR(decoded, values[i], std::fabs(values[i]) * 1e-7 + quantum) << i;
      } else if (std::fabs(values[i]) > 0.01) {
        EXPECT_GT(decoded * values[i], 0) << i;
      }
    }
  }
}

// An emission's buffers are kept from step to step (worker/publisher.h), so
// each encoder overwrites whatever its payload and quanta hold: the same
// message and quanta as into fresh buffers, whether the old ones were
// shorter, longer or as long. Every quanta index is reported written
// exactly once (Codec::QuantaWritten), on one thread and on three.
TEST(QuantaCodec, EncodersOverwriteTheBuffersOfAnEarlierEmission) {
  const TensorLayout layout = {{64, 300}, {64, 1}, {10, 64}, {10, 1}};
  const size_t n = LayoutParamCount(layout);
  const std::vector<float> values = Gaussian(n, 0.01, 5);
  for (const v1::Codec c : kQuantaCodecs) {
    SCOPED_TRACE(v1::Codec_Name(c));
    const Encoded fresh = EncodeOnce(Options(c, layout), values);
    for (const size_t old_size : {size_t{0}, n / 3, n, 5 * n}) {
      SCOPED_TRACE(old_size);
      for (const bool on_threads : {false, true}) {
        auto codec = *MakeCodec(Options(c, layout));
        v1::Update msg;
        msg.set_payload(std::string(4 * old_size, '\x5A'));
        msg.set_crc32c(7);
        std::vector<int64_t> quanta(old_size, int64_t{-3});
        std::vector<std::atomic<int>> reported(n);
        ASSERT_TRUE(codec
                        ->Encode(values, &msg, &quanta,
                                 on_threads ? ParallelFor(ThreeThreads) : nullptr,
                                 [&](size_t begin, size_t end) {
                                   for (size_t i = begin; i < end; ++i) ++reported[i];
                                 })
                        .ok());
        EXPECT_EQ(msg.SerializeAsString(), fresh.msg.SerializeAsString());
        EXPECT_EQ(EmittedQuanta(msg, quanta).ToVector(), fresh.quanta);
        size_t not_once = 0;
        for (const std::atomic<int>& r : reported) not_once += r.load() != 1;
        EXPECT_EQ(not_once, 0u);
      }
    }
  }
}

// Dyntree8's state between steps (scales, step count) taken up by another
// codec of the same options continues the first one's messages; state it
// cannot have had is refused, naming what is wrong, and changes nothing;
// the codecs that keep none refuse any.
TEST(QuantaCodec, DyntreeStateTakenUpContinuesTheSameMessages) {
  codec::CodecOptions options;
  options.codec = v1::CODEC_DYNTREE8;
  options.layout = {{20, 30}, {20, 1}};
  options.absmax_every = 5;
  const size_t n = codec::LayoutParamCount(options.layout);
  std::unique_ptr<codec::Codec> first = *codec::MakeCodec(options);
  std::unique_ptr<codec::Codec> second = *codec::MakeCodec(options);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  auto values = [&] {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  for (int step = 0; step < 3; ++step) {
    v1::Update msg;
    std::vector<int64_t> quanta;
    ASSERT_TRUE(first->Encode(values(), &msg, &quanta).ok());
  }
  const codec::CodecState state = first->State();
  EXPECT_EQ(state.steps, 3u);
  ASSERT_EQ(state.scales.size(), 2u);
  EXPECT_GT(state.scales[0], 0.0f);
  codec::CodecState wrong = state;
  wrong.scales.pop_back();
  EXPECT_NE(second->Restore(wrong).message().find("1 scales for 2 tensors"), std::string::npos);
  wrong = state;
  wrong.scales[1] = 0.5f;
  EXPECT_NE(second->Restore(wrong).message().find("scale of tensor 1"), std::string::npos);
  EXPECT_EQ(second->State(), codec::CodecState({0, {0.0f, 0.0f}}));
  ASSERT_TRUE(second->Restore(state).ok());
  for (int step = 3; step < 8; ++step) {  // across the rescale at step 5
    const std::vector<float> v = values();
    v1::Update a, b;
    std::vector<int64_t> qa, qb;
    ASSERT_TRUE(first->Encode(v, &a, &qa).ok());
    ASSERT_TRUE(second->Encode(v, &b, &qb).ok());
    EXPECT_EQ(a.payload(), b.payload()) << "step " << step;
  }
  options.codec = v1::CODEC_ONEBIT;
  std::unique_ptr<codec::Codec> onebit = *codec::MakeCodec(options);
  EXPECT_TRUE(onebit->Restore({}).ok());
  EXPECT_EQ(onebit->Restore(state).code(), absl::StatusCode::kInvalidArgument);
}

TEST(QuantaCodec, PayloadSizesAreTheSpecsFormulas) {
  const TensorLayout layout = SmallLayout();
  const uint64_t p = LayoutParamCount(layout);  // 320 + 16 + 48 + 3 = 387
  const std::vector<float> values = Gaussian(p, 1, 2);
  const uint64_t header = 4 + 8 * layout.size(), columns = 20 + 1 + 16 + 1;
  EXPECT_EQ(EncodeOnce(Options(v1::CODEC_ONEBIT), values).msg.payload().size(),
            header + 8 * columns + (p + 7) / 8);
  EXPECT_EQ(EncodeOnce(Options(v1::CODEC_DYNTREE8), values).msg.payload().size(),
            header + 4 * layout.size() + p);
  EXPECT_EQ(EncodeOnce(Options(v1::CODEC_DENSE_FP32), values).msg.payload().size(), 4 * p);
}

TEST(OneBit, ReconstructionValuesAreTheColumnMeansOfEachSign) {
  // One 3x2 matrix; column 0: 3, -1, 5 -> plus 4, minus -1; column 1:
  // -2, -4, 0 -> plus 0 (zero counts as non-negative), minus -3. Plus a
  // 2x1 bias: 7, 1 -> plus 4, no negatives -> minus 0. At fb = 0 the
  // values are quanta.
  CodecOptions o = Options(v1::CODEC_ONEBIT, {{3, 2}, {2, 1}});
  o.fraction_bits = 0;
  const Encoded e = EncodeOnce(o, {3, -2, -1, -4, 5, 0, 7, 1});
  EXPECT_EQ(e.quanta, (std::vector<int64_t>{4, -3, -1, -3, 4, 0, 4, 4}));
  DecodedUpdate d;
  ASSERT_TRUE(DecodeUpdate(e.msg, &d).ok());
  EXPECT_EQ(d.quanta, e.quanta);
}

TEST(DynTree, MagnitudesFollowThePapersFormulaAndGrow) {
  // Code 127: no leading zero, six tree bits all ones: 0.1 + 0.9 * 127/128.
  DynTreeFraction top = DynTreeMagnitude(127);
  EXPECT_DOUBLE_EQ(double(top.numerator) / top.denominator, 0.1 + 0.9 * 127.0 / 128.0);
  // Code 1: six leading zeros, the flag, no tree bits: 10^-6 * 0.55.
  DynTreeFraction one = DynTreeMagnitude(1);
  EXPECT_DOUBLE_EQ(double(one.numerator) / one.denominator, 0.55e-6);
  // Code 0b0010110: two leading zeros, flag, tree bits 110 = 6 of 16.
  DynTreeFraction mid = DynTreeMagnitude(0b0010110);
  EXPECT_DOUBLE_EQ(double(mid.numerator) / mid.denominator, 1e-2 * (0.1 + 0.9 * 13.0 / 32.0));
  double previous = 0;
  for (uint32_t m = 1; m < 128; ++m) {
    const DynTreeFraction f = DynTreeMagnitude(m);
    const double v = double(f.numerator) / f.denominator;
    EXPECT_GT(v, previous) << m;
    previous = v;
    EXPECT_EQ(DynTreeNearestCode(v), m);
  }
  EXPECT_EQ(DynTreeNearestCode(0), 0u);
  EXPECT_EQ(DynTreeNearestCode(2.0), 127u);  // a stale abs max clips
  // Exact integer decode: scale 2^52 at code 127 is round(2^52 * 1271/1280).
  EXPECT_EQ(DynTreeQuanta(127, int64_t{1} << 52),
            int64_t(((unsigned __int128)(uint64_t{1} << 52) * 1271 * 2 + 1280) / 2560));
}

// The branch-free search gives std::lower_bound's code over the midpoints
// between magnitudes, bit for bit: at every midpoint and its neighbours,
// and at a million values spread over every decade the codes cover.
TEST(DynTree, NearestCodeIsTheLowerBoundOverTheMidpoints) {
  std::vector<double> mids;
  for (uint32_t m = 0; m < 127; ++m) {
    const DynTreeFraction a = DynTreeMagnitude(m), b = DynTreeMagnitude(m + 1);
    mids.push_back(0.5 *
                   (double(a.numerator) / a.denominator + double(b.numerator) / b.denominator));
  }
  auto reference = [&](double x) {
    return static_cast<uint32_t>(std::lower_bound(mids.begin(), mids.end(), x) - mids.begin());
  };
  std::vector<double> values = {0.0,
                                1.0,
                                2.0,
                                1e300,
                                std::numeric_limits<double>::infinity(),
                                std::numeric_limits<double>::quiet_NaN(),
                                std::numeric_limits<double>::denorm_min()};
  for (const double mid : mids) {
    values.push_back(mid);
    values.push_back(std::nextafter(mid, 0.0));
    values.push_back(std::nextafter(mid, 2.0));
  }
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-9.0, 0.5);
  for (int i = 0; i < 1000000; ++i) values.push_back(std::pow(10.0, exponent(rng)));
  for (const double x : values) ASSERT_EQ(DynTreeNearestCode(x), reference(x)) << x;
}

// The encoder's loop (elementwise.h DynTreeEncodeValues), every copy: the
// AVX2 one four values at a time and the AVX-512 one eight, in intrinsics,
// with the rest on the portable body: each value's code and quanta are the
// scalar definition's,
// at every length's tail, near every midpoint, and for the values that are
// no fraction at all (NaN, Inf, 0 and -0, above the abs max, below 2^-22).
// (Elementwise.EveryCopyGivesTheScalarDefinitionsBits prints which copies
// this CPU runs: kBest is the AVX-512 one where it has AVX-512.)
TEST(DynTree8, EveryCopyOfTheEncodeLoopGivesTheDefinitionsCodes) {
  std::mt19937_64 rng(23);
  std::vector<float> values;
  for (uint32_t m = 0; m < 127; ++m) {
    const DynTreeFraction a = DynTreeMagnitude(m), b = DynTreeMagnitude(m + 1);
    const float mid = static_cast<float>(
        0.5 * (double(a.numerator) / a.denominator + double(b.numerator) / b.denominator));
    for (const float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2.0f)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  for (const float special : {0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 1.0f, -1.0f, 3.0f, -3.0f,
                              1e-9f, -1e-9f, 0x1p-22f, -0x1p-22f, 1e-45f, -1e-45f}) {
    values.push_back(special);
  }
  for (int i = 0; i < 100000; ++i) {
    const float v = static_cast<float>(std::pow(10.0, -9.0 + 9.5 * double(rng() % 100000) / 1e5));
    values.push_back(rng() % 2 ? -v : v);
  }
  std::array<int64_t, 128> magnitudes;
  for (uint32_t m = 0; m < 128; ++m) magnitudes[m] = DynTreeQuanta(m, int64_t{1} << 40);
  for (const double to_normalized : {1.0, 0.37, 1e6, std::ldexp(1.0, -10)}) {
    SCOPED_TRACE(to_normalized);
    // Every tail length (0 to 17 values), then everything at once.
    for (size_t begin = 0, len = 0; begin + len <= values.size(); begin += len, ++len) {
      if (len > 17) len = values.size() - begin;
      constexpr int kCopies = 3;
      const Isa isas[kCopies] = {Isa::kPortable, Isa::kAvx2, Isa::kBest};
      std::vector<char> codes[kCopies];
      std::vector<int64_t> quanta[kCopies];
      for (int copy = 0; copy < kCopies; ++copy) {
        codes[copy].assign(len, 'x');
        quanta[copy].assign(len, 5);
        DynTreeEncodeValues(values.data() + begin, len, to_normalized, magnitudes.data(),
                            codes[copy].data(), quanta[copy].data(), isas[copy]);
      }
      for (size_t i = 0; i < len; ++i) {
        const float v = values[begin + i];
        const uint32_t m = DynTreeNearestCode(std::fabs(double(v)) * to_normalized);
        const bool negative = v < 0 && m != 0;
        const char code = static_cast<char>((uint32_t{negative} << 7) | m);
        const int64_t q = negative ? -magnitudes[m] : magnitudes[m];
        for (int copy = 0; copy < kCopies; ++copy) {
          ASSERT_EQ(codes[copy][i], code) << "copy " << copy << " value " << v;
          ASSERT_EQ(quanta[copy][i], q) << "copy " << copy << " value " << v;
        }
      }
      if (len == values.size() - begin && len > 17) break;
    }
  }
  // Exact ties: |v| * to_normalized is a midpoint itself (v = +-1, the
  // midpoint as the scale), which goes to the smaller magnitude.
  const std::vector<float> ones = {1, -1, 1, 1, -1, -1, 1, -1, 1, -1, 1};
  const double* mids = DynTreeMidpoints();
  for (uint32_t m = 0; m < 127; ++m) {
    for (const Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kBest}) {
      std::vector<char> codes(ones.size());
      std::vector<int64_t> quanta(ones.size());
      DynTreeEncodeValues(ones.data(), ones.size(), mids[m], magnitudes.data(), codes.data(),
                          quanta.data(), isa);
      for (size_t i = 0; i < ones.size(); ++i) {
        const uint32_t code = m == 0 ? 0u : (ones[i] < 0 ? 0x80u : 0u) | m;
        ASSERT_EQ(uint32_t(uint8_t(codes[i])), code) << "midpoint " << m << " value " << i;
      }
    }
  }
}

TEST(DynTree8, StaleAbsMaxClipsToTheTopCodeAndRecomputesEveryK) {
  CodecOptions o = Options(v1::CODEC_DYNTREE8, {{1, 4}});
  o.absmax_every = 2;
  auto codec = *MakeCodec(o);
  v1::Update msg;
  std::vector<int64_t> q1, q2, q3;
  ASSERT_TRUE(codec->Encode(std::vector<float>{0.5f, -0.25f, 0, 0.125f}, &msg, &q1).ok());
  ASSERT_TRUE(codec->Encode(std::vector<float>{2.0f, 0, 0, 0}, &msg, &q2).ok());
  EXPECT_EQ(q2[0], q1[0]);  // still scaled by 0.5: 2.0 clips to the top code
  ASSERT_TRUE(codec->Encode(std::vector<float>{2.0f, 0, 0, 0}, &msg, &q3).ok());
  EXPECT_EQ(q3[0], DynTreeQuanta(127, int64_t{2} << 32));  // recomputed on the third step
}

TEST(ErrorFeedback, TheResidualKeepsExactlyWhatTheMessageDidNotCarry) {
  const TensorLayout layout = SmallLayout();
  for (const v1::Codec c : kQuantaCodecs) {
    SCOPED_TRACE(v1::Codec_Name(c));
    const CodecOptions o = Options(c);
    auto codec = *MakeCodec(o);
    std::vector<float> residual = Gaussian(LayoutParamCount(layout), 0.01, 3);
    const std::vector<float> before = residual;
    v1::Update msg;
    std::vector<int64_t> written;
    ASSERT_TRUE(EncodeWithFeedback(*codec, o, residual, &msg, &written).ok());
    // What every replica adds: the quanta, or the dense payload's values.
    QuantaSpan quanta = EmittedQuanta(msg, written);
    ASSERT_EQ(quanta.size(), residual.size());
    for (size_t i = 0; i < residual.size(); ++i) {
      EXPECT_EQ(residual[i],
                before[i] - static_cast<float>(double(quanta[i]) * std::ldexp(1.0, -32)));
    }
    // Summed over many steps, what was sent tracks what was accumulated:
    // the difference is the last residual, not a growing error.
    double sent = double(quanta[5]) * std::ldexp(1.0, -32), given = 0;
    for (int step = 0; step < 200; ++step) {
      const std::vector<float> delta = Gaussian(residual.size(), 0.001, 100 + step);
      for (size_t i = 0; i < residual.size(); ++i) residual[i] += delta[i];
      given += delta[5];
      ASSERT_TRUE(EncodeWithFeedback(*codec, o, residual, &msg, &written).ok());
      quanta = EmittedQuanta(msg, written);
      sent += double(quanta[5]) * std::ldexp(1.0, -32);
    }
    EXPECT_NEAR(sent + residual[5], given + before[5], 1e-6);
  }
}

// The dense encode in its caller's pass (DenseFeedbackPass, the CPU
// backend's optimizer) is EncodeWithFeedback: chunks on three threads, each
// encoding its blocks as it writes them, give its message and leave its
// residual, bit for bit (values of -0 and +0, on the grid, near its limit
// among them); a value it cannot encode (Inf, NaN, |r| 2^fb >= 2^62) in any
// block is refused with EncodeWithFeedback's words and the residual left
// as the pass found it, bit for bit; chunks that leave values out are
// encoded again whole.
TEST(ErrorFeedback, TheDenseEncodeInTheCallersPassIsEncodeWithFeedback) {
  const size_t n = 3 * DenseFeedbackPass::kBlockValues + 1001;
  CodecOptions o = Options(v1::CODEC_DENSE_FP32, {{1, uint32_t(n)}});
  ASSERT_TRUE(DenseFeedbackPass::UsableFor(o));
  std::vector<float> start = Gaussian(n, 1e-6, 21);
  for (size_t i = 0; i < n; i += 53) start[i] = -0.0f;
  for (size_t i = 7; i < n; i += 61) start[i] = 0.0f;
  for (size_t i = 11; i < n; i += 67) start[i] = std::ldexp(float(i % 9) - 4.0f, -32);
  start[n - 2] = std::nextafter(std::ldexp(1.0f, 30), 0.0f);  // just below the limit
  start[n - 3] = -start[n - 2];
  const auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<uint32_t>(v[i]);
    return b;
  };
  // The pass over `residual`, on `chunks` threads (a ParallelFor), each
  // chunk in blocks with their bounds taken as written.
  const auto in_pass = [&](std::vector<float>& residual, v1::Update* msg,
                           std::vector<int64_t>* quanta, const ParallelFor& chunks) {
    DenseFeedbackPass pass(o, residual, msg);
    chunks(n, [&](size_t begin, size_t end) {
      DenseFeedbackPass::Chunk chunk(pass, begin);
      for (size_t block = begin; block < end; block += DenseFeedbackPass::kBlockValues) {
        const size_t len = std::min(DenseFeedbackPass::kBlockValues, end - block);
        int32_t bound = 0;
        for (size_t i = block; i < block + len; ++i) {
          bound = std::max(bound, ResidualMagnitudeBits(residual[i]));
        }
        chunk.Encode(len, uint32_t(bound));
      }
    });
    return pass.Finish(quanta, nullptr);
  };
  const ParallelFor drops_a_range = [](size_t count,
                                       const std::function<void(size_t, size_t)>& fn) {
    fn(0, count / 3);
    fn(2 * count / 3, count);
  };
  auto codec = *MakeCodec(o);
  std::vector<float> want_residual = start;
  v1::Update want;
  std::vector<int64_t> want_quanta;
  ASSERT_TRUE(EncodeWithFeedback(*codec, o, want_residual, &want, &want_quanta).ok());
  for (const ParallelFor& chunks : {ParallelFor(ThreeThreads), drops_a_range}) {
    std::vector<float> residual = start;
    v1::Update msg;
    msg.set_payload("a previous emission's buffer");
    std::vector<int64_t> quanta = {1, 2};
    ASSERT_TRUE(in_pass(residual, &msg, &quanta, chunks).ok());
    EXPECT_EQ(msg.SerializeAsString(), want.SerializeAsString());
    EXPECT_EQ(bits(residual), bits(want_residual));
    EXPECT_TRUE(quanta.empty());
  }
  for (const size_t at : {size_t{0}, n / 3 - 1, n / 2, n - 1}) {
    for (const float bad : {INFINITY, -NAN, std::ldexp(1.0f, 30), -std::ldexp(1.0f, 31)}) {
      std::vector<float> residual = start;
      residual[at] = bad;
      const std::vector<float> before = residual;
      v1::Update unused;
      std::vector<int64_t> unused_quanta;
      std::vector<float> scanned = before;
      const absl::Status refused =
          EncodeWithFeedback(*codec, o, scanned, &unused, &unused_quanta);
      ASSERT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
      v1::Update msg;
      std::vector<int64_t> quanta = {1};
      EXPECT_EQ(in_pass(residual, &msg, &quanta, ThreeThreads), refused) << at << " " << bad;
      EXPECT_EQ(bits(residual), bits(before)) << at << " " << bad;
      EXPECT_TRUE(msg.payload().empty());
      EXPECT_TRUE(quanta.empty());
    }
  }
  o.error_feedback = false;
  EXPECT_FALSE(DenseFeedbackPass::UsableFor(o));
  EXPECT_FALSE(DenseFeedbackPass::UsableFor(Options(v1::CODEC_ONEBIT)));
}

// A bound from the residual's writer (model::AccumulateDelta) below the
// grid's limit: the same message, quanta and residual as the check's own
// scan gives. At or above the limit the scan runs and refuses, naming the
// element, with nothing emitted.
TEST(ErrorFeedback, AWritersBoundSkipsTheScanAndChangesNothing) {
  const TensorLayout layout = SmallLayout();
  for (const v1::Codec c : kQuantaCodecs) {
    SCOPED_TRACE(v1::Codec_Name(c));
    const CodecOptions o = Options(c);
    auto scanned = *MakeCodec(o);
    auto bounded = *MakeCodec(o);
    std::vector<float> r1 = Gaussian(LayoutParamCount(layout), 0.01, 13);
    std::vector<float> r2 = r1;
    uint32_t bound = 0;
    for (const float x : r2) bound = std::max(bound, std::bit_cast<uint32_t>(x) & 0x7FFFFFFFu);
    v1::Update m1, m2;
    std::vector<int64_t> q1, q2;
    ASSERT_TRUE(EncodeWithFeedback(*scanned, o, r1, &m1, &q1).ok());
    ASSERT_TRUE(EncodeWithFeedback(*bounded, o, r2, &m2, &q2, ThreeThreads, bound).ok());
    EXPECT_EQ(m1.SerializeAsString(), m2.SerializeAsString());
    EXPECT_EQ(q1, q2);
    EXPECT_EQ(0, std::memcmp(r1.data(), r2.data(), 4 * r1.size()));
    std::vector<float> bad = r2;
    bad[21] = INFINITY;
    const std::vector<float> before = bad;
    const absl::Status s = EncodeWithFeedback(*bounded, o, bad, &m2, &q2, ThreeThreads,
                                              std::bit_cast<uint32_t>(INFINITY));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("element 21"), std::string::npos) << s;
    EXPECT_EQ(0, std::memcmp(bad.data(), before.data(), 4 * bad.size()));
  }
}

TEST(ErrorFeedback, WithoutFeedbackTheRemainderIsDropped) {
  CodecOptions o = Options(v1::CODEC_DYNTREE8);
  o.error_feedback = false;
  auto codec = *MakeCodec(o);
  std::vector<float> residual = Gaussian(LayoutParamCount(o.layout), 0.01, 4);
  v1::Update msg;
  std::vector<int64_t> quanta;
  ASSERT_TRUE(EncodeWithFeedback(*codec, o, residual, &msg, &quanta).ok());
  for (const float r : residual) EXPECT_EQ(r, 0.0f);
}

TEST(ErrorFeedback, NanOrInfEmitsNothingAndLeavesTheResidual) {
  for (const v1::Codec c : kQuantaCodecs) {
    for (const float bad : {NAN, INFINITY, 3e10f}) {
      SCOPED_TRACE(::testing::Message() << v1::Codec_Name(c) << " " << bad);
      const CodecOptions o = Options(c);
      auto codec = *MakeCodec(o);
      std::vector<float> residual = Gaussian(LayoutParamCount(o.layout), 0.01, 5);
      residual[77] = bad;
      const std::vector<float> before = residual;
      v1::Update msg;
      std::vector<int64_t> quanta{1, 2};
      const absl::Status s = EncodeWithFeedback(*codec, o, residual, &msg, &quanta);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find("element 77"), std::string::npos) << s;
      EXPECT_TRUE(quanta.empty());
      EXPECT_EQ(0, std::memcmp(residual.data(), before.data(), 4 * residual.size()));
    }
  }
}

// With the caller's threads (the CPU backend's pool), error feedback and the
// encoders that split their elementwise pass give the same message, quanta
// and residual bit for bit as on one thread, over several steps (dyntree8's
// stale abs max included); a bad element in any chunk still refuses the
// whole step with the residual unchanged.
TEST(ErrorFeedback, OnThreadsItIsOneThreadsBitForBit) {
  const TensorLayout layout = {{256, 300}, {256, 1}, {10, 256}, {10, 1}};
  for (const v1::Codec c : kQuantaCodecs) {
    SCOPED_TRACE(v1::Codec_Name(c));
    CodecOptions o = Options(c, layout);
    o.absmax_every = 2;
    auto one = *MakeCodec(o);
    auto many = *MakeCodec(o);
    std::vector<float> r1 = Gaussian(LayoutParamCount(layout), 0.01, 11);
    std::vector<float> r2 = r1;
    for (int step = 0; step < 4; ++step) {
      const std::vector<float> grad = Gaussian(r1.size(), 0.01, 20 + step);
      for (size_t i = 0; i < r1.size(); ++i) {
        r1[i] += grad[i];
        r2[i] += grad[i];
      }
      v1::Update m1, m2;
      std::vector<int64_t> q1, q2;
      ASSERT_TRUE(EncodeWithFeedback(*one, o, r1, &m1, &q1).ok());
      ASSERT_TRUE(EncodeWithFeedback(*many, o, r2, &m2, &q2, ThreeThreads).ok());
      EXPECT_EQ(m1.SerializeAsString(), m2.SerializeAsString()) << "step " << step;
      EXPECT_EQ(q1, q2) << "step " << step;
      EXPECT_EQ(q1.empty(), c == v1::CODEC_DENSE_FP32);
      EXPECT_EQ(0, std::memcmp(r1.data(), r2.data(), 4 * r1.size())) << "step " << step;
    }
    std::vector<float> bad = r2;
    bad[bad.size() - 5] = NAN;  // in the last chunk
    const std::vector<float> before = bad;
    v1::Update msg;
    std::vector<int64_t> quanta{1};
    const absl::Status s = EncodeWithFeedback(*many, o, bad, &msg, &quanta, ThreeThreads);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(absl::StrCat("element ", bad.size() - 5)), std::string::npos) << s;
    EXPECT_TRUE(quanta.empty());
    EXPECT_EQ(0, std::memcmp(bad.data(), before.data(), 4 * bad.size()));
  }
}

// The dense apply's sum, every copy, against the definition: modulo 2^64,
// and a wrap counted where the signed sum leaves the int64 range (both
// ways, at the edges, in a vector's lanes and the tail).
TEST(Elementwise, TheDenseSumWrapsAndCountsAsTheDefinition) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  std::mt19937_64 rng(5);
  std::vector<int64_t> start, delta;
  const std::pair<int64_t, int64_t> edges[] = {
      {kMax, 1},      {kMin, -1}, {kMax, kMax}, {kMin, kMin}, {kMax, kMin}, {kMax - 1, 1},
      {kMin + 1, -1}, {0, kMin},  {-1, kMin},   {1, kMax},    {0, 0},       {kMax, -1}};
  for (const auto& [a, b] : edges) {
    start.push_back(a);
    delta.push_back(b);
  }
  for (int i = 0; i < 1000; ++i) {
    start.push_back(static_cast<int64_t>(rng()) >> (rng() % 4));
    delta.push_back(static_cast<int64_t>(rng()) >> (rng() % 64));
  }
  uint64_t want_wraps = 0;
  std::vector<int64_t> want(start.size());
  for (size_t i = 0; i < start.size(); ++i) {
    want[i] =
        static_cast<int64_t>(static_cast<uint64_t>(start[i]) + static_cast<uint64_t>(delta[i]));
    const __int128 exact = static_cast<__int128>(start[i]) + delta[i];
    want_wraps += exact > kMax || exact < kMin;
  }
  ASSERT_GT(want_wraps, 4u);
  for (const Isa isa : kEveryCopy) {
    for (const size_t n : {start.size(), size_t{7}, size_t{12}, size_t{0}}) {
      std::vector<int64_t> got(start.begin(), start.begin() + n);
      uint64_t wraps_in_n = 0;
      for (size_t i = 0; i < n; ++i) {
        const __int128 exact = static_cast<__int128>(start[i]) + delta[i];
        wraps_in_n += exact > kMax || exact < kMin;
      }
      EXPECT_EQ(AddQuantaWrapping(got.data(), delta.data(), n, {}, isa), wraps_in_n) << n;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << n;
      // With the float copy written in the sum's loop: the same sums and
      // wraps, and the copy QuantaToFloats makes of the sums.
      std::vector<int64_t> with_copy(start.begin(), start.begin() + n);
      std::vector<float> copy(n, -1.0f), want_copy(n);
      EXPECT_EQ(AddQuantaWrapping(with_copy.data(), delta.data(), n, {copy.data(), 0x1p-40}, isa),
                wraps_in_n)
          << n;
      EXPECT_EQ(with_copy, got) << n;
      QuantaToFloats(got.data(), n, 0x1p-40, want_copy.data(), Isa::kPortable);
      EXPECT_TRUE(std::equal(copy.begin(), copy.end(), want_copy.begin(), [](float a, float b) {
        return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
      })) << n;
    }
  }
}

// The vector copies stream the float copy in aligned stores from its first
// 32-byte boundary (elementwise.h FloatCopyOut), with the values before it
// and after the last whole vector by the body: at every alignment of the
// copy and length about a vector's, with sums that wrap in the head, the
// vectors and the tail, each copy gives the definition's sums, wraps and
// float bits, from int64 deltas and from a dense payload, and writes
// nothing outside [0, n).
TEST(Elementwise, TheSumsStreamedFloatCopyIsTheDefinitionsAtEveryAlignment) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr size_t kRoom = 160;
  constexpr double kQuantum = 0x1p-32;
  std::mt19937_64 rng(11);
  std::vector<int64_t> start(kRoom), delta(kRoom);
  std::vector<char> payload(4 * kRoom);
  for (size_t i = 0; i < kRoom; ++i) {
    // Payload values are integers below 2^62 (24 significant bits): every
    // tenth sum starts at the int64 edge and wraps.
    const float value = std::ldexp(static_cast<float>(rng() % (1u << 24)), int(rng() % 39)) *
                        (rng() % 2 ? -1.0f : 1.0f);
    std::memcpy(payload.data() + 4 * i, &value, 4);
    delta[i] = static_cast<int64_t>(value);
    start[i] = i % 10 == 3 ? (value >= 0 ? kMax : -kMax - 1)
                           : static_cast<int64_t>(rng()) >> (rng() % 40);
  }
  for (const Isa isa : kEveryCopy) {
    for (size_t offset = 0; offset < 9; ++offset) {
      for (const size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 40, 100, 150}) {
        uint64_t want_wraps = 0;
        std::vector<int64_t> want(n);
        std::vector<float> want_copy(n);
        for (size_t i = 0; i < n; ++i) {
          const __int128 exact = static_cast<__int128>(start[i]) + delta[i];
          want_wraps += exact > kMax || exact < -kMax - 1;
          want[i] = static_cast<int64_t>(static_cast<uint64_t>(start[i]) +
                                         static_cast<uint64_t>(delta[i]));
          want_copy[i] = QuantaToFloat(want[i], kQuantum);
        }
        for (const bool from_payload : {false, true}) {
          // The copy at `offset` floats past a 64-byte boundary, its
          // neighbours marked.
          alignas(64) std::array<float, kRoom + 16> room;
          room.fill(-7.0f);
          float* copy = room.data() + offset;
          std::vector<int64_t> sums(start.begin(), start.begin() + n);
          const uint64_t wraps =
              from_payload
                  ? AddDenseFp32Wrapping(sums.data(), payload.data(), n, {copy, kQuantum}, isa)
                  : AddQuantaWrapping(sums.data(), delta.data(), n, {copy, kQuantum}, isa);
          const std::string where = absl::StrCat(ElementwiseCopy(isa), " offset ", offset, " n ",
                                                 n, from_payload ? " payload" : " int64");
          ASSERT_EQ(wraps, want_wraps) << where;
          ASSERT_EQ(sums, want) << where;
          ASSERT_TRUE(std::equal(copy, copy + n, want_copy.begin(), [](float a, float b) {
            return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
          })) << where;
          for (size_t i = 0; i < room.size(); ++i) {
            if (i < offset || i >= offset + n) {
              ASSERT_EQ(room[i], -7.0f) << where << " at " << i;
            }
          }
        }
      }
    }
  }
}

// The round trip's per-parameter passes run as an AVX-512 or an AVX2 copy
// where the CPU has one (codec/elementwise.h): every copy gives exactly the
// scalar definitions' bits, on values of every magnitude, ties, the clamp,
// NaN and Inf, signed zeros and subnormals, at several fraction_bits; so
// machines with and without either compute the same replica.
TEST(Elementwise, EveryCopyGivesTheScalarDefinitionsBits) {
  std::printf("FIGURES AVX-512 on this CPU: %s, AVX2: %s (a copy the CPU cannot run is left out)\n",
              Avx512Available() ? "yes" : "no", Avx2Available() ? "yes" : "no");
  std::mt19937_64 rng(17);
  std::vector<float> values;
  for (int i = 0; i < 100000; ++i) {
    const int exponent = static_cast<int>(rng() % 90) - 70;  // 2^-70 .. 2^19
    const float v = std::ldexp(static_cast<float>(rng() % (1u << 24)) / (1u << 24), exponent);
    values.push_back(rng() % 2 ? -v : v);
  }
  for (const float special : {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-45f, -1e-40f, 0.5f, 1.5f,
                              2.5f, -2.5f, 0x1p23f, 0x1p23f + 1, 0x1p24f + 2, 1e30f}) {
    values.push_back(special);
  }
  for (int i = 0; i < 1000; ++i) values.push_back((static_cast<int>(rng() % 2001) - 1000) * 0.5f);
  for (const int fb : {0, 16, 32, 62}) {
    SCOPED_TRACE(::testing::Message() << "fraction_bits " << fb);
    const size_t n = values.size();
    constexpr int kCopies = std::size(kEveryCopy);
    std::vector<char> payload[kCopies];
    for (int copy = 0; copy < kCopies; ++copy) {
      payload[copy].resize(4 * n);
      EncodeDenseFp32Values(values.data(), n, fb, payload[copy].data(), kEveryCopy[copy]);
    }
    // The payload's quanta, by the scalar definition (every value the
    // encoder writes is one: it clamps NaN and Inf too).
    std::vector<int64_t> quanta[1] = {std::vector<int64_t>(n)};
    for (size_t i = 0; i < n; ++i) {
      const float want = QuantaPayloadValue(values[i], fb);
      ASSERT_TRUE(PayloadValueToQuanta(want, &quanta[0][i])) << values[i];
      for (int copy = 0; copy < kCopies; ++copy) {
        uint32_t got;
        std::memcpy(&got, payload[copy].data() + 4 * i, 4);
        ASSERT_EQ(got, std::bit_cast<uint32_t>(want)) << "copy " << copy << " value " << values[i];
      }
    }
    // The decode, each value on its own (one bad value fails the whole
    // payload) and the encoder's whole payload, against PayloadValueToQuanta.
    for (size_t i = 0; i < n; ++i) {
      int64_t want = 0;
      const bool valid = PayloadValueToQuanta(values[i], &want);
      for (const Isa isa : kEveryCopy) {
        int64_t got = 0;
        ASSERT_EQ(DecodeDenseFp32Values(reinterpret_cast<const char*>(&values[i]), 1, &got, isa),
                  valid)
            << values[i];
        if (valid) {
          ASSERT_EQ(got, want) << values[i];
        }
      }
    }
    for (const Isa isa : kEveryCopy) {
      std::vector<int64_t> decoded(n);
      ASSERT_TRUE(DecodeDenseFp32Values(payload[0].data(), n, decoded.data(), isa));
      ASSERT_EQ(decoded, quanta[0]);
      // The self-check's pass agrees (DenseFp32ValuesEqual).
      ASSERT_TRUE(DenseFp32ValuesEqual(payload[0].data(), quanta[0].data(), n, isa));
      // One bad value anywhere (in a vector's lanes or the tail) fails it.
      for (const size_t at : {size_t{0}, size_t{7}, size_t{16}, n / 2, n - 1}) {
        for (const float bad : {0.5f, NAN, INFINITY, 0x1p62f}) {
          std::vector<char> one_bad = payload[0];
          std::memcpy(one_bad.data() + 4 * at, &bad, 4);
          ASSERT_FALSE(DecodeDenseFp32Values(one_bad.data(), n, decoded.data(), isa))
              << bad << " at " << at;
          ASSERT_FALSE(DenseFp32ValuesEqual(one_bad.data(), quanta[0].data(), n, isa))
              << bad << " at " << at;
        }
        // So does one quanta that differs, by one, or by one that a float
        // conversion of it would hide (2^30 + 1 -> 2^30).
        std::vector<int64_t> other = quanta[0];
        other[at] += 1;
        ASSERT_FALSE(DenseFp32ValuesEqual(payload[0].data(), other.data(), n, isa)) << at;
        std::vector<char> big = payload[0];
        const float two_to_30 = 0x1p30f;
        std::memcpy(big.data() + 4 * at, &two_to_30, 4);
        other = quanta[0];
        other[at] = (int64_t{1} << 30) + 1;
        ASSERT_FALSE(DenseFp32ValuesEqual(big.data(), other.data(), n, isa)) << at;
        other[at] = int64_t{1} << 30;
        ASSERT_TRUE(DenseFp32ValuesEqual(big.data(), other.data(), n, isa)) << at;
      }
      // The validity walk, and against a payload (a dense message is its
      // own decoded form): -0 and +0 are both 0 quanta; one bad value on
      // either side, or one value that differs, fails it.
      ASSERT_TRUE(DenseFp32ValuesValid(payload[0].data(), n, isa));
      ASSERT_TRUE(DenseFp32PayloadsEqual(payload[0].data(), payload[0].data(), n, isa));
      ASSERT_TRUE(DenseFp32PayloadsEqual(payload[0].data(), payload[2].data(), n, isa));
      for (const size_t at : {size_t{0}, size_t{7}, size_t{16}, n / 2, n - 1}) {
        std::vector<char> zeros = payload[0], negative_zeros = payload[0];
        const float zero = 0.0f, negative_zero = -0.0f;
        std::memcpy(zeros.data() + 4 * at, &zero, 4);
        std::memcpy(negative_zeros.data() + 4 * at, &negative_zero, 4);
        ASSERT_TRUE(DenseFp32PayloadsEqual(zeros.data(), negative_zeros.data(), n, isa)) << at;
        for (const float bad : {0.5f, NAN, INFINITY, 0x1p62f}) {
          std::vector<char> one_bad = payload[0];
          std::memcpy(one_bad.data() + 4 * at, &bad, 4);
          ASSERT_FALSE(DenseFp32ValuesValid(one_bad.data(), n, isa)) << bad << " at " << at;
          ASSERT_FALSE(DenseFp32PayloadsEqual(one_bad.data(), one_bad.data(), n, isa))
              << bad << " at " << at;
          ASSERT_FALSE(DenseFp32PayloadsEqual(payload[0].data(), one_bad.data(), n, isa))
              << bad << " at " << at;
        }
        std::vector<char> other = payload[0];
        const float seven = 7.0f, eight = 8.0f;
        std::memcpy(other.data() + 4 * at, &seven, 4);
        std::memcpy(zeros.data() + 4 * at, &eight, 4);
        ASSERT_FALSE(DenseFp32PayloadsEqual(other.data(), zeros.data(), n, isa)) << at;
      }
    }
    const double quantum = std::ldexp(1.0, -fb);
    std::vector<int64_t> q(n);
    for (size_t i = 0; i < n; ++i) {
      q[i] = static_cast<int64_t>(rng() >> (rng() % 64)) * (rng() % 2 ? -1 : 1);
    }
    std::vector<float> residual[kCopies], floats[kCopies], from_payload[kCopies];
    std::vector<float> from_quanta = values;
    SubtractQuanta(from_quanta.data(), quanta[0].data(), n, quantum, Isa::kPortable);
    for (int copy = 0; copy < kCopies; ++copy) {
      residual[copy] = values;
      floats[copy].resize(n);
      SubtractQuanta(residual[copy].data(), q.data(), n, quantum, kEveryCopy[copy]);
      QuantaToFloats(q.data(), n, quantum, floats[copy].data(), kEveryCopy[copy]);
      // From a dense payload, the same bits as from its int64 quanta.
      from_payload[copy] = values;
      SubtractDenseFp32(from_payload[copy].data(), payload[0].data(), n, fb, kEveryCopy[copy]);
      ASSERT_EQ(0, std::memcmp(from_payload[copy].data(), from_quanta.data(), 4 * n)) << copy;
    }
    // The dense apply's sum from a payload: the int64 sum's bits and wraps
    // (q's values near the int64 range wrap some sums).
    std::vector<int64_t> want_sums = q;
    const uint64_t wraps =
        AddQuantaWrapping(want_sums.data(), quanta[0].data(), n, {}, Isa::kPortable);
    if (fb == 62) {
      ASSERT_GT(wraps, 0u);  // so the counting of wraps after the sums runs too
    }
    for (const Isa isa : kEveryCopy) {
      std::vector<int64_t> sums = q;
      ASSERT_EQ(AddDenseFp32Wrapping(sums.data(), payload[0].data(), n, {}, isa), wraps);
      ASSERT_EQ(sums, want_sums);
    }
    // With the replica's float copy written in the sum's loop: the same
    // sums and wraps, and the copy QuantaToFloats makes of them.
    std::vector<float> want_copy(n);
    QuantaToFloats(want_sums.data(), n, quantum, want_copy.data(), Isa::kPortable);
    for (const Isa isa : kEveryCopy) {
      std::vector<int64_t> sums = q;
      std::vector<float> copy(n, -1.0f);
      ASSERT_EQ(
          AddDenseFp32Wrapping(sums.data(), payload[0].data(), n, {copy.data(), quantum}, isa),
          wraps);
      ASSERT_EQ(sums, want_sums);
      ASSERT_EQ(0, std::memcmp(copy.data(), want_copy.data(), 4 * n));
    }
    for (size_t i = 0; i < n; ++i) {
      const float step = static_cast<float>(static_cast<double>(q[i]) * quantum);
      const float left = values[i] - step;
      for (int copy = 0; copy < kCopies; ++copy) {
        ASSERT_EQ(std::bit_cast<uint32_t>(residual[copy][i]), std::bit_cast<uint32_t>(left)) << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(floats[copy][i]), std::bit_cast<uint32_t>(step)) << i;
      }
    }
  }
}

// The AVX2 copies convert between int64 and double two ways: by a magic
// number where all eight values of a vector are below 2^51 in magnitude,
// and bit by bit otherwise. Vectors whose eight values all sit at one edge
// of that range (2^51 - 1, 2^51, 2^51 + 1, 2^52 +- 1, 2^53 +- 1, 2^62, the
// int64 ends), each sign, give every copy the definition's bits: the float
// copy, the feedback, the sums from int64 quanta and from a payload, and
// the decode.
TEST(Elementwise, TheConversionsAreExactAtTheEdgesOfTheirFastRange) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> edges;
  for (const int64_t e : {int64_t{1} << 51, int64_t{1} << 52, int64_t{1} << 53, int64_t{1} << 62}) {
    for (const int64_t d : {-1, 0, 1}) edges.push_back(e + d);
  }
  edges.push_back(kMax);
  const size_t n = 8 * 2 * (edges.size() + 1) + 5;  // whole vectors of each, then a tail
  std::vector<int64_t> q;
  for (const int64_t e : edges) {
    for (const int64_t v : {e, -e}) q.insert(q.end(), 8, v);
  }
  q.insert(q.end(), 8, std::numeric_limits<int64_t>::min());
  q.resize(n, int64_t{1} << 51);
  const double quantum = 0x1p-20;
  std::vector<float> want_floats(n), want_residual(n, 1.5f);
  for (size_t i = 0; i < n; ++i) {
    want_floats[i] = static_cast<float>(static_cast<double>(q[i]) * quantum);
    want_residual[i] -= want_floats[i];
  }
  // Payload values at the same edges, as floats (below 2^51 by one ulp,
  // 2^51, above it by one ulp, and the others) and the quanta they are.
  std::vector<float> payload_values;
  for (const float e : {0x1p51f, 0x1p52f, 0x1p53f, 0x1p61f}) {
    for (const float v : {std::nextafter(e, 0.0f), e, std::nextafter(e, INFINITY)}) {
      for (const float s : {v, -v}) payload_values.insert(payload_values.end(), 8, s);
    }
  }
  payload_values.resize(n, 3.0f);
  std::vector<char> payload(4 * n);
  std::memcpy(payload.data(), payload_values.data(), 4 * n);
  std::vector<int64_t> payload_quanta(n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(PayloadValueToQuanta(payload_values[i], &payload_quanta[i])) << payload_values[i];
  }
  for (const Isa isa : kEveryCopy) {
    std::vector<float> floats(n), residual(n, 1.5f);
    QuantaToFloats(q.data(), n, quantum, floats.data(), isa);
    SubtractQuanta(residual.data(), q.data(), n, quantum, isa);
    ASSERT_EQ(0, std::memcmp(floats.data(), want_floats.data(), 4 * n));
    ASSERT_EQ(0, std::memcmp(residual.data(), want_residual.data(), 4 * n));
    // The sums from int64 quanta and from the payload, with the copy.
    std::vector<int64_t> zeros(n, 0), sums(n, 0), decoded(n);
    std::vector<float> copy(n);
    AddQuantaWrapping(sums.data(), q.data(), n, {copy.data(), quantum}, isa);
    ASSERT_EQ(sums, q);
    ASSERT_EQ(0, std::memcmp(copy.data(), want_floats.data(), 4 * n));
    AddDenseFp32Wrapping(zeros.data(), payload.data(), n, {copy.data(), quantum}, isa);
    ASSERT_EQ(zeros, payload_quanta);
    ASSERT_TRUE(DecodeDenseFp32Values(payload.data(), n, decoded.data(), isa));
    ASSERT_EQ(decoded, payload_quanta);
    ASSERT_TRUE(DenseFp32ValuesEqual(payload.data(), payload_quanta.data(), n, isa));
  }
}

// The validity walk (DenseFp32ValuesValid: the publisher's
// self-check and every reader's test) is PayloadValueToQuanta's answer for
// every kind of float: each binade's integers and halves, the edges of 2^23
// and 2^62, subnormals, NaN and Inf of both signs, and a strided sweep of
// all 2^32 bit patterns; each value put in a vector lane (among 31 valid
// ones) and alone (a tail), in every copy.
TEST(Elementwise, TheValidityWalkIsPayloadValueToQuantasTest) {
  std::vector<uint32_t> patterns;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4099) patterns.push_back(bits);
  for (uint32_t exponent = 0; exponent < 256; ++exponent) {
    for (const uint32_t mantissa : {0u, 1u, 2u, 0x400000u, 0x7ffffeu, 0x7fffffu, 0x7ff000u}) {
      for (const uint32_t sign : {0u, 0x80000000u}) {
        const uint32_t bits = sign | (exponent << 23) | mantissa;
        patterns.push_back(bits);
        patterns.push_back(bits - 1);
        patterns.push_back(bits + 1);
      }
    }
  }
  for (const float edge : {0x1p23f, 0x1p23f - 0.5f, 0x1p23f + 1, 0x1p22f + 0.5f, 0x1p62f, 0x1p61f,
                           std::nextafter(0x1p62f, 0.0f), 0.5f, 1.0f, 1e-45f}) {
    for (const float v : {edge, -edge}) patterns.push_back(std::bit_cast<uint32_t>(v));
  }
  constexpr size_t kLanes = 32;
  std::vector<char> lanes(4 * kLanes);
  for (size_t k = 0; k < kLanes; ++k) {
    const float valid_value = static_cast<float>(int(k) - 16);
    std::memcpy(lanes.data() + 4 * k, &valid_value, 4);
  }
  for (size_t i = 0; i < patterns.size(); ++i) {
    const uint32_t bits = patterns[i];
    int64_t quanta;
    const bool want = PayloadValueToQuanta(std::bit_cast<float>(bits), &quanta);
    std::vector<char> block = lanes;
    std::memcpy(block.data() + 4 * (i % kLanes), &bits, 4);
    for (const Isa isa : kEveryCopy) {
      ASSERT_EQ(DenseFp32ValuesValid(block.data(), kLanes, isa), want)
          << std::hex << "bits 0x" << bits << " in lane " << std::dec << i % kLanes;
      ASSERT_EQ(DenseFp32ValuesValid(block.data() + 4 * (i % kLanes), 1, isa), want)
          << std::hex << "bits 0x" << bits << " alone";
    }
  }
}

// The dense payload's one pass (its readers' CRC, validity and what their
// sink does with each block): on one thread, on three, and with a
// ParallelFor that leaves a range out, a good payload's every value is
// taken exactly once and the copy is the payload; a CRC that differs, or
// one bad value anywhere (a block's first, a chunk's last, the tail), is
// refused naming it, with every value taken given back; a length that is
// no multiple of 4 is in the CRC whole.
TEST(QuantaCodec, TheDenseCheckIsTheCrcTheValuesAndTheSinkInOnePass) {
  const size_t n = 3 * kCacheBlockValues + 1001;
  const Encoded e =
      EncodeOnce(Options(v1::CODEC_DENSE_FP32, {{1, uint32_t(n)}}), Gaussian(n, 0.01, 12));
  const std::string& good = e.msg.payload();
  const ParallelFor drops_a_range = [](size_t count,
                                       const std::function<void(size_t, size_t)>& fn) {
    fn(0, count / 3);
    fn(2 * count / 3, count);
  };
  for (const ParallelFor& threads :
       {ParallelFor(nullptr), ParallelFor(ThreeThreads), drops_a_range}) {
    // How many times each value is held: taken minus given back (each
    // chunk's thread writes its own values).
    std::vector<int> held(n + 1, 0);
    std::string copy(good.size(), '\0');
    payload::DenseFp32BlockSink sink;
    sink.take = [&](size_t first, size_t len, const char* at) {
      ASSERT_EQ(at, good.data() + 4 * first);
      std::memcpy(copy.data() + 4 * first, at, 4 * len);
      for (size_t i = first; i < first + len; ++i) ++held[i];
    };
    sink.give_back = [&](size_t first, size_t len) {
      for (size_t i = first; i < first + len; ++i) --held[i];
    };
    EXPECT_TRUE(payload::CheckDenseFp32Payload(good, Crc32c(good), sink, threads).ok());
    EXPECT_EQ(copy, good);
    EXPECT_EQ(std::count(held.begin(), held.begin() + n, 1), ptrdiff_t(n));
    std::fill(held.begin(), held.end(), 0);

    absl::Status s = payload::CheckDenseFp32Payload(good, Crc32c(good) ^ 1, sink, threads);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("CRC-32C mismatch"), std::string::npos) << s;
    EXPECT_EQ(std::count(held.begin(), held.end(), 0), ptrdiff_t(n + 1)) << "given back";

    for (const size_t at : {size_t{0}, kCacheBlockValues, n / 3 - 1, n / 2, n - 1}) {
      std::string bad = good;
      const float half = 0.5f;
      std::memcpy(bad.data() + 4 * at, &half, 4);
      sink.take = [&](size_t first, size_t len, const char*) {
        for (size_t i = first; i < first + len; ++i) ++held[i];
      };
      s = payload::CheckDenseFp32Payload(bad, Crc32c(bad), sink, threads);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << at;
      EXPECT_NE(s.message().find(absl::StrCat("value ", at, " is 0.5")), std::string::npos) << s;
      EXPECT_EQ(std::count(held.begin(), held.end(), 0), ptrdiff_t(n + 1)) << at;
      // A CRC that differs is named first.
      s = payload::CheckDenseFp32Payload(bad, Crc32c(good), sink, threads);
      EXPECT_NE(s.message().find("CRC-32C mismatch"), std::string::npos) << s;
      EXPECT_TRUE(payload::CheckDenseFp32Payload(bad, Crc32c(bad), {}, threads)
                      .message()
                      .find(absl::StrCat("value ", at, " is 0.5")) != std::string::npos);
    }
    const std::string odd = good + "xy";
    EXPECT_TRUE(payload::CheckDenseFp32Payload(odd, Crc32c(odd), {}, threads).ok());
    EXPECT_FALSE(payload::CheckDenseFp32Payload(odd, Crc32c(good), {}, threads).ok());
  }
  EXPECT_TRUE(payload::DenseFp32ValueError(good).ok());
}

// The publisher's self-check in its own apply (CheckAndApplyDenseUpdate) is
// the check, then the apply: on one thread, on three and with a ParallelFor
// that leaves a range out, a good message gives the quanta, the float copy
// and the count of wrapped sums that CheckQuantaUpdate then ApplyDense give;
// a message either refuses (a header, a CRC, a value in any block) is
// refused with its words and the replica left as it was, bit for bit, its
// wrapped sums uncounted.
TEST(QuantaCodec, TheSelfCheckInTheApplyIsTheCheckThenTheApply) {
  const size_t n = 3 * kCacheBlockValues + 1001;
  const CodecOptions o = Options(v1::CODEC_DENSE_FP32, {{1, uint32_t(n)}});
  const Encoded e = EncodeOnce(o, Gaussian(n, 0.01, 13));
  // Weights near both ends of the int64 range, so that some sums wrap.
  std::vector<int64_t> start(n);
  std::mt19937_64 rng(5);
  for (size_t i = 0; i < n; ++i) {
    start[i] = i % 97 == 0   ? std::numeric_limits<int64_t>::max() - int64_t(rng() % 1000)
               : i % 89 == 0 ? std::numeric_limits<int64_t>::min() + int64_t(rng() % 1000)
                             : int64_t(rng() % (uint64_t{1} << 40)) - (int64_t{1} << 39);
  }
  const auto fresh = [&] {
    auto r = FixedPointReplica::Create(n, o.fraction_bits, FixedPointReplica::FloatCopy::kKept);
    EXPECT_TRUE(r.ok());
    EXPECT_TRUE(r->Load(start).ok());
    return *std::move(r);
  };
  const auto same = [](const FixedPointReplica& a, const FixedPointReplica& b) {
    return std::equal(a.quanta().begin(), a.quanta().end(), b.quanta().begin(), b.quanta().end()) &&
           std::equal(a.weights().begin(), a.weights().end(), b.weights().begin(),
                      b.weights().end(),
                      [](float x, float y) {
                        return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y);
                      }) &&
           a.wrapped() == b.wrapped();
  };
  const ParallelFor drops_a_range = [](size_t count,
                                       const std::function<void(size_t, size_t)>& fn) {
    fn(0, count / 3);
    fn(2 * count / 3, count);
  };
  // The same message with its payload's value `at` replaced and its CRC
  // made again: a value only the value check refuses.
  const auto with_value = [&](size_t at, float value) {
    v1::Update m = e.msg;
    std::memcpy(m.mutable_payload()->data() + 4 * at, &value, 4);
    m.set_crc32c(Crc32c(m.payload()));
    return m;
  };
  std::vector<v1::Update> refused;
  for (const size_t at : {size_t{0}, kCacheBlockValues, n / 3 - 1, n / 2, n - 1}) {
    refused.push_back(with_value(at, 0.5f));
  }
  refused.push_back(with_value(n / 2 + 7, std::numeric_limits<float>::quiet_NaN()));
  refused.push_back(with_value(9, 0x1p62f));
  refused.push_back(e.msg);
  refused.back().set_crc32c(e.msg.crc32c() ^ 0x80);
  refused.push_back(e.msg);
  refused.back().set_count(n - 1);
  refused.push_back(e.msg);
  refused.back().mutable_payload()->resize(4 * n - 4);
  for (const ParallelFor& threads :
       {ParallelFor(nullptr), ParallelFor(ThreeThreads), drops_a_range}) {
    // ApplyDense trusts its ParallelFor: the reference is one thread's.
    FixedPointReplica checked_then_applied = fresh();
    ASSERT_TRUE(CheckQuantaUpdate(e.msg, EmittedQuanta(e.msg, {}), threads).ok());
    ASSERT_TRUE(checked_then_applied.ApplyDense(EmittedQuanta(e.msg, {})).ok());
    ASSERT_GT(checked_then_applied.wrapped(), 0u) << "the test must wrap some sums";
    FixedPointReplica in_one = fresh();
    ASSERT_TRUE(CheckAndApplyDenseUpdate(e.msg, &in_one, threads).ok());
    EXPECT_TRUE(same(in_one, checked_then_applied));

    for (const v1::Update& bad : refused) {
      const absl::Status want = CheckQuantaUpdate(bad, EmittedQuanta(bad, {}), threads);
      ASSERT_FALSE(want.ok());
      FixedPointReplica replica = fresh();
      ASSERT_TRUE(replica.ApplyDense(EmittedQuanta(e.msg, {})).ok());  // wraps counted
      const FixedPointReplica before = replica;
      const absl::Status got = CheckAndApplyDenseUpdate(bad, &replica, threads);
      EXPECT_EQ(got, want);
      EXPECT_TRUE(same(replica, before)) << got;
    }
  }
  v1::Update other = e.msg;
  other.set_codec(v1::CODEC_ONEBIT);
  FixedPointReplica replica = fresh();
  EXPECT_EQ(CheckAndApplyDenseUpdate(other, &replica).code(), absl::StatusCode::kInternal);
}

// The publisher's self-check on a replica's threads (the CRC in chunks
// combined, the dense walk in chunks): it accepts what one thread accepts
// and refuses, with the same words, a value that differs in any chunk, a
// payload value that is no count of quanta, and a CRC that does not match.
TEST(QuantaCodec, TheSelfCheckOnThreadsRefusesWhatOneThreadRefuses) {
  // Payloads past kCrc32cThreadedBytes, so that the CRC is split too.
  const TensorLayout layout = {{256, 400}, {256, 1}, {10, 256}, {10, 1}};
  const size_t n = LayoutParamCount(layout);
  ASSERT_GT(4 * n, kCrc32cThreadedBytes);
  const std::vector<float> values = Gaussian(n, 0.01, 8);
  for (const v1::Codec c : kQuantaCodecs) {
    SCOPED_TRACE(v1::Codec_Name(c));
    Encoded e = EncodeOnce(Options(c, layout), values);
    const auto check = [&](const v1::Update& msg, std::span<const int64_t> quanta) {
      const absl::Status one = CheckQuantaUpdate(msg, quanta);
      const absl::Status three = CheckQuantaUpdate(msg, quanta, ThreeThreads);
      EXPECT_EQ(one, three);
      return three;
    };
    EXPECT_TRUE(check(e.msg, e.quanta).ok());
    for (const size_t at : {size_t{0}, n / 3 - 1, n / 3, n / 2, 2 * n / 3, n - 1}) {
      std::vector<int64_t> other = e.quanta;
      other[at] += 1;
      const absl::Status s = check(e.msg, other);
      EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
      EXPECT_NE(s.message().find(absl::StrCat("value ", at, " decodes to")), std::string::npos)
          << s;
    }
    // One payload byte in the last third changed, the CRC left.
    v1::Update corrupt = e.msg;
    (*corrupt.mutable_payload())[corrupt.payload().size() - 5] ^= 0x10;
    absl::Status s = check(corrupt, e.quanta);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("CRC-32C mismatch"), std::string::npos) << s;
    if (c == v1::CODEC_DENSE_FP32) {
      const float half = 0.5f;
      const size_t at = n - 2;
      corrupt = e.msg;
      corrupt.mutable_payload()->replace(4 * at, 4, reinterpret_cast<const char*>(&half), 4);
      corrupt.set_crc32c(Crc32c(corrupt.payload()));
      s = check(corrupt, e.quanta);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      EXPECT_NE(s.message().find(absl::StrCat("value ", at, " is 0.5")), std::string::npos) << s;
    }
  }
}

// Rewrites the payload and fixes the CRC, so the payload checks are reached.
v1::Update WithPayload(v1::Update msg, std::string payload) {
  msg.set_payload(std::move(payload));
  msg.set_crc32c(Crc32c(msg.payload()));
  return msg;
}

void ExpectRejected(const v1::Update& msg, const std::string& why) {
  DecodedUpdate d;
  d.quanta = {1, 2, 3};
  d.dense_fp32 = "a previous message's";
  const absl::Status s = DecodeUpdate(msg, &d);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << why << ": " << s;
  EXPECT_TRUE(d.quanta.empty()) << why;
  EXPECT_TRUE(d.dense_fp32.empty()) << why;
  // The publisher's self-check refuses it too, whatever quanta it is given.
  if (msg.param_count() <= (1u << 20)) {
    const std::vector<int64_t> zeros(msg.param_count(), 0);
    EXPECT_FALSE(CheckQuantaUpdate(msg, zeros).ok()) << why;
  }
  EXPECT_FALSE(
      testing::ReferenceDecodeQuanta(msg.codec(), msg.payload(), msg.param_count()).has_value() &&
      msg.count() == msg.param_count() && msg.step_quanta() == 0 && msg.rice_k() == 0 &&
      Crc32c(msg.payload()) == msg.crc32c())
      << why << ": the reference decoder accepts it";
}

void SetF32(std::string* p, size_t at, float v) { std::memcpy(p->data() + at, &v, 4); }

TEST(QuantaCodec, HeaderViolationsAreRejected) {
  const std::vector<float> values = Gaussian(LayoutParamCount(SmallLayout()), 0.01, 6);
  for (const v1::Codec c : kQuantaCodecs) {
    SCOPED_TRACE(v1::Codec_Name(c));
    const v1::Update good = EncodeOnce(Options(c), values).msg;
    v1::Update m = good;
    m.set_count(m.count() - 1);
    ExpectRejected(m, "count");
    m = good;
    m.set_step_quanta(5);
    ExpectRejected(m, "step_quanta");
    m = good;
    m.set_rice_k(1);
    ExpectRejected(m, "rice_k");
    m = good;
    m.set_crc32c(m.crc32c() ^ 1);
    ExpectRejected(m, "crc");
    ExpectRejected(WithPayload(good, good.payload() + "x"), "a byte too many");
    ExpectRejected(WithPayload(good, good.payload().substr(0, good.payload().size() - 1)),
                   "a byte short");
    m = good;
    m.set_param_count(m.param_count() + 1);
    m.set_count(m.count() + 1);
    ExpectRejected(m, "param_count beyond the layout");
  }
}

TEST(QuantaCodec, PayloadViolationsAreRejected) {
  const std::vector<float> values = Gaussian(LayoutParamCount(SmallLayout()), 0.01, 7);
  // Layout header (onebit and dyntree8 share it).
  for (const v1::Codec c : {v1::CODEC_ONEBIT, v1::CODEC_DYNTREE8}) {
    SCOPED_TRACE(v1::Codec_Name(c));
    const v1::Update good = EncodeOnce(Options(c), values).msg;
    std::string p = good.payload();
    p[0] = 0;
    ExpectRejected(WithPayload(good, p), "no tensors");
    p = good.payload();
    p[3] = 0x7F;
    ExpectRejected(WithPayload(good, p), "more tensors than bytes");
    p = good.payload();
    p[4] = 17;  // W1 17 x 20: sizes no longer sum to param_count
    ExpectRejected(WithPayload(good, p), "layout sum");
    p = good.payload();
    std::memset(p.data() + 8, 0, 4);  // W1 has 0 columns
    ExpectRejected(WithPayload(good, p), "zero columns");
    p = good.payload();
    SetF32(&p, 36, 0.5f);  // first value after the header: not an integer
    ExpectRejected(WithPayload(good, p), "fractional quanta");
    SetF32(&p, 36, NAN);
    ExpectRejected(WithPayload(good, p), "NaN");
    SetF32(&p, 36, std::ldexp(1.0f, 62));
    ExpectRejected(WithPayload(good, p), "2^62");
  }
  const v1::Update onebit = EncodeOnce(Options(v1::CODEC_ONEBIT), values).msg;
  std::string p = onebit.payload();
  p.back() = static_cast<char>(p.back() | 0x80);  // 387 = 48 * 8 + 3: bit 7 is padding
  ExpectRejected(WithPayload(onebit, p), "padding bit");
  const v1::Update tree = EncodeOnce(Options(v1::CODEC_DYNTREE8), values).msg;
  p = tree.payload();
  p[p.size() - 5] = static_cast<char>(0x80);
  ExpectRejected(WithPayload(tree, p), "negative zero code");
  p = tree.payload();
  SetF32(&p, 36, -4.0f);
  ExpectRejected(WithPayload(tree, p), "negative scale");
  SetF32(&p, 36, std::ldexp(1.0f, 53));
  ExpectRejected(WithPayload(tree, p), "scale above 2^52");
  const v1::Update dense = EncodeOnce(Options(v1::CODEC_DENSE_FP32), values).msg;
  p = dense.payload();
  SetF32(&p, 8, INFINITY);
  ExpectRejected(WithPayload(dense, p), "infinite value");
  // The dense decoder checks every value in one pass and names the first
  // bad one: each kind, anywhere, and the edges that are valid.
  for (const size_t at : {size_t{0}, size_t{5}, dense.payload().size() / 4 - 1}) {
    for (const float bad : {0.5f, -1.25f, NAN, -INFINITY, std::ldexp(1.0f, 62),
                            -std::ldexp(1.0f, 62), std::ldexp(1.0f, 100)}) {
      p = dense.payload();
      SetF32(&p, 4 * at, bad);
      DecodedUpdate d;
      const absl::Status s = DecodeUpdate(WithPayload(dense, p), &d);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << bad << " at " << at;
      EXPECT_NE(s.message().find(absl::StrCat("value ", at, " is")), std::string::npos) << s;
      EXPECT_TRUE(d.quanta.empty());
      EXPECT_TRUE(d.dense_fp32.empty());
    }
  }
  const float largest = std::nextafter(std::ldexp(1.0f, 62), 0.0f);
  for (const float edge : {largest, -largest, -0.0f, 3.0f, std::ldexp(1.0f, 40)}) {
    p = dense.payload();
    SetF32(&p, 20, edge);
    DecodedUpdate d;
    ASSERT_TRUE(DecodeUpdate(WithPayload(dense, p), &d).ok()) << edge;
    EXPECT_EQ(d.decoded_quanta()[5], static_cast<int64_t>(edge)) << edge;
  }
}

TEST(QuantaCodec, DecodersAgreeWithTheReferenceOnRandomCorruptions) {
  std::mt19937_64 rng(8);
  const std::vector<float> values = Gaussian(LayoutParamCount(SmallLayout()), 0.01, 9);
  for (const v1::Codec c : kQuantaCodecs) {
    const v1::Update good = EncodeOnce(Options(c), values).msg;
    int accepted = 0;
    for (int trial = 0; trial < 3000; ++trial) {
      std::string p = good.payload();
      const int flips = 1 + int(rng() % 3);
      for (int f = 0; f < flips; ++f) p[rng() % p.size()] ^= static_cast<char>(1 << (rng() % 8));
      const v1::Update m = WithPayload(good, p);
      DecodedUpdate d;
      const bool ok = DecodeUpdate(m, &d).ok();
      const auto ref = testing::ReferenceDecodeQuanta(c, p, m.param_count());
      ASSERT_EQ(ok, ref.has_value()) << v1::Codec_Name(c) << " trial " << trial;
      if (ok) {
        ASSERT_EQ(d.decoded_quanta().ToVector(), *ref) << v1::Codec_Name(c) << " trial " << trial;
        ++accepted;
      }
    }
    EXPECT_GT(accepted, 100) << "corruptions should often stay valid: the check needs both kinds";
  }
}

// Both layouts of the decoded form (codec/quanta_span.h): onebit's int64
// quanta, and the dense payload itself, applied and summed as its values
// converted, on one thread and on three, through every checksum copy.
TEST(QuantaCodec, ApplyAndChecksumUseTheDecodedQuanta) {
  const TensorLayout layout = SmallLayout();
  std::vector<float> values = Gaussian(LayoutParamCount(layout), 0.01, 10);
  values[3] = 3e9f;  // a dense value past 2^62 / 2^32 clamps; one past int32 stays exact
  values[4] = -1e9f;
  for (const v1::Codec c : {v1::CODEC_ONEBIT, v1::CODEC_DENSE_FP32}) {
    SCOPED_TRACE(v1::Codec_Name(c));
    const Encoded e = EncodeOnce(Options(c), values);
    DecodedUpdate d;
    ASSERT_TRUE(DecodeUpdate(e.msg, &d).ok());
    for (const bool on_threads : {false, true}) {
      auto replica = *FixedPointReplica::Create(values.size(), 32);
      ASSERT_TRUE(ApplyDecoded(d, &replica, FixedPointReplica::Prefetch::kOn,
                               on_threads ? ParallelFor(ThreeThreads) : nullptr)
                      .ok());
      EXPECT_EQ(std::vector<int64_t>(replica.quanta().begin(), replica.quanta().end()), e.quanta);
      for (size_t i = 0; i < values.size(); ++i) {
        ASSERT_EQ(replica.weights()[i], QuantaToFloat(e.quanta[i], 0x1p-32)) << i;
      }
      const WeightChecksum checksum(42);
      for (const Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kBest}) {
        EXPECT_EQ(checksum.Of(d.decoded_quanta(), isa), checksum.Of(e.quanta, Isa::kPortable));
      }
      EXPECT_EQ(ChecksumContribution(checksum, d), checksum.Of(replica.quanta()));
    }
  }
}

// QuantaPayloadValue as the wire defines it (docs/wire-codecs.md): the weight
// units times 2^fraction_bits, as a float rounded to the nearest integer
// (ties to even), clamped below 2^62 with its sign. The encoder computes
// it without a libm call per element; this is the definition it must meet,
// value for value, bit for bit.
float ReferencePayloadValue(double weight_units, int fraction_bits) {
  const float largest = std::nextafter(static_cast<float>(kMaxPayloadQuanta), 0.0f);
  const float scaled = std::nearbyint(static_cast<float>(std::ldexp(weight_units, fraction_bits)));
  if (!(std::fabs(scaled) < kMaxPayloadQuanta)) return std::copysign(largest, scaled);
  return scaled;
}

TEST(QuantaPayloadValue, IsTheScaledValueRoundedToNearestEvenAndClampedBitForBit) {
  std::vector<double> values = {0.0,
                                -0.0,
                                1.0,
                                -1.0,
                                std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity(),
                                std::numeric_limits<double>::quiet_NaN(),
                                1e300,
                                -1e300,
                                std::numeric_limits<float>::denorm_min(),
                                std::numeric_limits<double>::denorm_min()};
  std::mt19937_64 rng(20261126);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-70, 70);
  for (int i = 0; i < 400000; ++i) values.push_back(std::ldexp(mantissa(rng), exponent(rng)));
  for (const int fraction_bits : {0, 1, 8, 16, 24, 32, 40, 52, 61, 62}) {
    // Halves and integers near the float's integer range (2^23, 2^24), where
    // rounding changes its step, in quanta and so in weight units.
    for (double q = -16.5; q <= 16.5; q += 0.5) {
      for (const double base : {0.0, 8388608.0, -8388608.0, 16777216.0, 4611686018427387904.0}) {
        values.push_back(std::ldexp(base + q, -fraction_bits));
      }
    }
    for (const double v : values) {
      const float got = QuantaPayloadValue(v, fraction_bits);
      const float want = ReferencePayloadValue(v, fraction_bits);
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
          << "value " << v << " at " << fraction_bits << " fraction bits: " << got << " vs "
          << want;
    }
  }
}

TEST(QuantaCodec, OptionsAreChecked) {
  CodecOptions o = Options(v1::CODEC_ONEBIT);
  o.absmax_every = 0;
  EXPECT_EQ(MakeCodec(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(v1::CODEC_THRESHOLD_RICE);
  EXPECT_EQ(MakeCodec(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(v1::CODEC_DYNTREE8, {});
  EXPECT_EQ(MakeCodec(o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CodecFromFlagName("onebit").value(), v1::CODEC_ONEBIT);
  EXPECT_EQ(CodecFromFlagName("8bit").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reckon::codec
