// worker::Publisher, the one path of a worker's own update: numbered,
// encoded, self-checked, applied to the own replica, handed to the sink
// (moved), counted; all or nothing when the emission is refused.
#include "worker/publisher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "codec/crc32c.h"
#include "codec/update_message.h"
#include "cpu/cpu_backend.h"
#include "model/forwarding_backend.h"
#include "model/model.h"

namespace reckon::worker {
namespace {

struct Sent {
  v1::Update message;
  codec::DecodedUpdate decoded;
};

struct Fixture {
  Fixture() {
    config.shape = *model::ModelShape::Parse("6,5,3", "relu");
    config.threads = 1;
    config.step = *codec::MakeThresholdStep(0.01, config.fraction_bits);
    initial = *model::InitialWeights(config.shape, config.fraction_bits, 1);
    own = *cpu::MakeCpuBackend(config);
    twin = *cpu::MakeCpuBackend(config);
    EXPECT_TRUE(own->LoadWeights(initial).ok());
    EXPECT_TRUE(twin->LoadWeights(initial).ok());
  }
  PublisherOptions Options(bool with_sink) {
    PublisherOptions o;
    o.node_id = "w0";
    o.incarnation = 7;
    o.param_count = config.shape.param_count();
    if (with_sink) {
      o.sink = [this](v1::Update message, const codec::DecodedUpdate& decoded) {
        sent.push_back({std::move(message), decoded});
        return absl::OkStatus();
      };
    }
    return o;
  }
  codec::CodecOptions DenseCodec() const {
    codec::CodecOptions options;
    options.codec = v1::CODEC_DENSE_FP32;
    options.layout = config.shape.Layout();
    return options;
  }
  model::BackendConfig config;
  std::vector<int64_t> initial;
  std::unique_ptr<model::Backend> own, twin;
  std::vector<Sent> sent;
};

TEST(Publisher, NumbersEncodesAppliesAndSendsTheEmissionWhole) {
  Fixture f;
  Publisher publisher(f.Options(/*with_sink=*/true));
  const std::vector<std::vector<uint32_t>> emissions = {
      {0, 3u | 0x80000000u, 17}, {}, {1, 2, 40u | 0x80000000u, 44}};
  for (const std::vector<uint32_t>& words : emissions) {
    absl::StatusOr<Published> p =
        publisher.PublishThreshold(f.own.get(), words, f.config.step, WordsFrom::kLastEmission);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->updates, words.size());
    ASSERT_TRUE(f.twin->ApplyUpdates(f.config.step.step_quanta, words).ok());
  }
  ASSERT_EQ(f.sent.size(), emissions.size());
  for (size_t m = 0; m < emissions.size(); ++m) {
    // What the peers get decodes, on its own, to the emission, numbered.
    const v1::Update& message = f.sent[m].message;
    EXPECT_EQ(message.origin().node_id(), "w0");
    EXPECT_EQ(message.origin().incarnation(), 7u);
    EXPECT_EQ(message.seq(), m + 1);
    EXPECT_EQ(message.codec(), v1::CODEC_THRESHOLD_RICE);
    codec::DecodedUpdate decoded;
    ASSERT_TRUE(codec::DecodeUpdate(message, &decoded).ok());
    EXPECT_EQ(decoded.words, emissions[m]);
    EXPECT_EQ(f.sent[m].decoded.words, emissions[m]);
    EXPECT_EQ(f.sent[m].decoded.seq, m + 1);
    EXPECT_EQ(f.sent[m].decoded.step_quanta, f.config.step.step_quanta);
  }
  EXPECT_EQ(publisher.published(), emissions.size());
  // The own replica applied exactly what the peers apply.
  EXPECT_EQ(*f.own->ReadWeights(), *f.twin->ReadWeights());
  EXPECT_NE(*f.own->ReadWeights(), f.initial);
}

TEST(Publisher, ARefusedEmissionAppliesSendsAndNumbersNothing) {
  Fixture f;
  Publisher publisher(f.Options(/*with_sink=*/true));
  const std::vector<uint32_t> descending = {9, 4};
  const std::vector<uint32_t> past_the_model = {
      static_cast<uint32_t>(f.config.shape.param_count())};
  for (const std::vector<uint32_t>& words : {descending, past_the_model}) {
    absl::StatusOr<Published> p =
        publisher.PublishThreshold(f.own.get(), words, f.config.step, WordsFrom::kElsewhere);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
  }
  EXPECT_TRUE(f.sent.empty());
  EXPECT_EQ(publisher.published(), 0u);
  EXPECT_EQ(*f.own->ReadWeights(), f.initial);
  // The next good one is seq 1.
  ASSERT_TRUE(publisher
                  .PublishThreshold(f.own.get(), std::vector<uint32_t>{2}, f.config.step,
                                    WordsFrom::kElsewhere)
                  .ok());
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].message.seq(), 1u);
}

TEST(Publisher, AloneItNumbersAndAppliesFromWhereTheRunContinues) {
  Fixture f;
  Publisher publisher(f.Options(/*with_sink=*/false));
  publisher.ContinueAfter(41);  // a resumed run alone: seqs follow the steps
  absl::StatusOr<Published> p = publisher.PublishThreshold(f.own.get(), std::vector<uint32_t>{5, 6},
                                                           f.config.step, WordsFrom::kLastEmission);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->seq, 42u);
  EXPECT_EQ(publisher.published(), 42u);
  ASSERT_TRUE(f.twin->ApplyUpdates(f.config.step.step_quanta, std::vector<uint32_t>{5, 6}).ok());
  EXPECT_EQ(*f.own->ReadWeights(), *f.twin->ReadWeights());
}

// Alone, nothing takes the message away, so the payload buffer of the step
// before comes back to the encoder at its size: a dense encoder then
// overwrites it (resized from empty, 2.7 MB were zeroed first each step:
// 0.6% of a dense worker's samples).
TEST(Publisher, AloneTheEncodersBuffersComeBackAtTheirSize) {
  Fixture f;
  Publisher publisher(f.Options(/*with_sink=*/false));
  const uint64_t n = f.config.shape.param_count();
  const codec::CodecOptions options = f.DenseCodec();
  std::unique_ptr<codec::Codec> encoder = *codec::MakeCodec(options);
  std::vector<float> delta(n);
  v1::Update encoded;
  std::vector<int64_t> quanta;
  for (int step = 0; step < 3; ++step) {
    for (uint64_t i = 0; i < n; ++i) delta[i] = 0.001f * float(int((i + step) % 7) - 3);
    ASSERT_TRUE(codec::EncodeWithFeedback(*encoder, options, delta, &encoded, &quanta).ok());
    ASSERT_TRUE(publisher.PublishQuanta(f.own.get(), encoded, quanta).ok());
    EXPECT_EQ(encoded.codec(), v1::CODEC_UNSPECIFIED) << "step " << step;  // taken
    if (step > 0) {
      EXPECT_EQ(encoded.payload().size(), 4 * n) << "step " << step;
    }
    EXPECT_TRUE(quanta.empty()) << "step " << step;  // the dense payload is its decoded form
  }
}

TEST(Publisher, AQuantaCodecsEmissionIsTakenAppliedAndSent) {
  Fixture f;
  Publisher publisher(f.Options(/*with_sink=*/true));
  const uint64_t n = f.config.shape.param_count();
  const codec::CodecOptions options = f.DenseCodec();
  std::unique_ptr<codec::Codec> encoder = *codec::MakeCodec(options);
  std::vector<float> delta(n);
  for (uint64_t i = 0; i < n; ++i) delta[i] = 0.001f * float(int(i % 7) - 3);
  v1::Update encoded;
  std::vector<int64_t> quanta;
  ASSERT_TRUE(codec::EncodeWithFeedback(*encoder, options, delta, &encoded, &quanta).ok());
  const std::vector<int64_t> expected = codec::EmittedQuanta(encoded, quanta).ToVector();
  absl::StatusOr<Published> p = publisher.PublishQuanta(f.own.get(), encoded, quanta);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->updates, n);
  EXPECT_EQ(encoded.codec(), v1::CODEC_UNSPECIFIED);  // taken: no codec fields left
  EXPECT_EQ(encoded.crc32c(), 0u);
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].message.seq(), 1u);
  EXPECT_EQ(f.sent[0].message.origin().node_id(), "w0");
  codec::DecodedUpdate decoded;
  ASSERT_TRUE(codec::DecodeUpdate(f.sent[0].message, &decoded).ok());
  EXPECT_EQ(decoded.decoded_quanta().ToVector(), expected);
  // The sink's decoded form: the dense payload itself, a copy of it.
  EXPECT_EQ(f.sent[0].decoded.dense_fp32, f.sent[0].message.payload());
  EXPECT_EQ(f.sent[0].decoded.decoded_quanta().ToVector(), expected);
  ASSERT_TRUE(f.twin->ApplyDense(expected).ok());
  EXPECT_EQ(*f.own->ReadWeights(), *f.twin->ReadWeights());
  // The next emission encoded into the buffers the publisher left (kept at
  // their size, holding the last one's bytes): the same message as one
  // encoded into fresh buffers.
  for (uint64_t i = 0; i < n; ++i) delta[i] = 0.002f * float(int(i % 5) - 2);
  std::vector<float> fresh_delta = delta;
  v1::Update fresh;
  std::vector<int64_t> fresh_quanta;
  ASSERT_TRUE(
      codec::EncodeWithFeedback(*encoder, options, fresh_delta, &fresh, &fresh_quanta).ok());
  ASSERT_TRUE(codec::EncodeWithFeedback(*encoder, options, delta, &encoded, &quanta).ok());
  EXPECT_EQ(encoded.SerializeAsString(), fresh.SerializeAsString());
  const std::vector<int64_t> fresh_expected = codec::EmittedQuanta(fresh, fresh_quanta).ToVector();
  p = publisher.PublishQuanta(f.own.get(), encoded, quanta);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(f.sent.size(), 2u);
  ASSERT_TRUE(codec::DecodeUpdate(f.sent[1].message, &decoded).ok());
  EXPECT_EQ(decoded.decoded_quanta().ToVector(), fresh_expected);
  ASSERT_TRUE(f.twin->ApplyDense(fresh_expected).ok());
  EXPECT_EQ(*f.own->ReadWeights(), *f.twin->ReadWeights());
  // A dense emission of the wrong size: refused before anything is done.
  std::vector<int64_t> none;
  v1::Update other = f.sent[0].message;
  other.mutable_payload()->resize(4 * (n - 1));
  EXPECT_EQ(publisher.PublishQuanta(f.own.get(), other, none).status().code(),
            absl::StatusCode::kInvalidArgument);
  // So is an int64 emission (onebit's, dyntree8's) of the wrong size.
  std::vector<int64_t> short_one(n - 1, 1);
  other = f.sent[0].message;
  other.set_codec(v1::CODEC_ONEBIT);
  EXPECT_EQ(publisher.PublishQuanta(f.own.get(), other, short_one).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(publisher.published(), 2u);
}

// An encoder of the fixture's model for the codec, and a delta to emit.
struct QuantaEmitter {
  QuantaEmitter(const Fixture& f, v1::Codec codec) : delta(f.config.shape.param_count()) {
    options.codec = codec;
    options.layout = f.config.shape.Layout();
    options.fraction_bits = f.config.fraction_bits;
    encoder = *codec::MakeCodec(options);
    for (uint64_t i = 0; i < delta.size(); ++i) delta[i] = 0.001f * float(int(i % 7) - 3);
  }
  void Emit(v1::Update* encoded, std::vector<int64_t>* quanta) {
    ASSERT_TRUE(codec::EncodeWithFeedback(*encoder, options, delta, encoded, quanta).ok());
  }
  codec::CodecOptions options;
  std::unique_ptr<codec::Codec> encoder;
  std::vector<float> delta;
};

// The quanta codecs' self-check: an emission whose payload decodes to
// anything but the quanta given (an encoder bug: here one value moved by a
// quantum, or a payload value that is not one) is refused, naming the value,
// before anything is applied, sent or numbered; the next good one is seq 1.
class QuantaSelfCheck : public ::testing::TestWithParam<v1::Codec> {};

// An encoder's bug at value `index`: onebit's and dyntree8's quanta moved by
// one from what their payload says; a dense payload (its own decoded form)
// given a value that is no count of quanta, its CRC made to match.
void SpoilValue(v1::Update* encoded, std::vector<int64_t>* quanta, uint64_t index) {
  if (encoded->codec() != v1::CODEC_DENSE_FP32) {
    (*quanta)[index] += 1;
    return;
  }
  const float half = 0.5f;
  encoded->mutable_payload()->replace(4 * index, 4, reinterpret_cast<const char*>(&half), 4);
  encoded->set_crc32c(codec::Crc32c(encoded->payload()));
}

// The self-check's refusal of an emission whose value `index` is off.
void ExpectRefusedNamingValue(const absl::Status& s, v1::Codec codec, uint64_t index) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  const std::string names = codec == v1::CODEC_DENSE_FP32
                                ? absl::StrCat("value ", index, " is 0.5")
                                : absl::StrCat("value ", index, " decodes to");
  EXPECT_NE(s.message().find(names), std::string::npos) << s;
}

TEST_P(QuantaSelfCheck, AnEmissionThatDecodesToOtherQuantaIsNotSent) {
  Fixture f;
  Publisher publisher(f.Options(/*with_sink=*/true));
  const uint64_t n = f.config.shape.param_count();
  QuantaEmitter emitter(f, GetParam());
  v1::Update encoded;
  std::vector<int64_t> quanta;
  emitter.Emit(&encoded, &quanta);
  SpoilValue(&encoded, &quanta, n / 2);
  absl::StatusOr<Published> p = publisher.PublishQuanta(f.own.get(), encoded, quanta);
  ExpectRefusedNamingValue(p.status(), GetParam(), n / 2);
  EXPECT_NE(p.status().message().find("not sent"), std::string::npos) << p.status();
  // A payload whose CRC does not match it (a byte changed after the
  // encoder's CRC): refused as every receiver would.
  emitter.Emit(&encoded, &quanta);
  (*encoded.mutable_payload())[encoded.payload().size() - 1] ^= 0x01;
  p = publisher.PublishQuanta(f.own.get(), encoded, quanta);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal) << p.status();
  EXPECT_NE(p.status().message().find("CRC-32C mismatch"), std::string::npos) << p.status();
  EXPECT_TRUE(f.sent.empty());
  EXPECT_EQ(publisher.published(), 0u);
  EXPECT_EQ(*f.own->ReadWeights(), f.initial);
  emitter.Emit(&encoded, &quanta);
  const std::vector<int64_t> expected = codec::EmittedQuanta(encoded, quanta).ToVector();
  ASSERT_TRUE(publisher.PublishQuanta(f.own.get(), encoded, quanta).ok());
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].message.seq(), 1u);
  EXPECT_EQ(f.sent[0].decoded.decoded_quanta().ToVector(), expected);
  ASSERT_TRUE(f.twin->ApplyDense(expected).ok());
  EXPECT_EQ(*f.own->ReadWeights(), *f.twin->ReadWeights());
}

// A backend whose lent threads count the chunks they run, and that counts
// the dense applies asked of it.
class CountingHostThreads : public model::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  codec::ParallelFor HostThreads() override {
    return [this, real = real().HostThreads()](size_t n, const auto& fn) {
      real(n, [&](size_t begin, size_t end) {
        ++chunks;
        fn(begin, end);
      });
    };
  }
  absl::Status ApplyDense(codec::QuantaSpan quanta) override {
    ++dense_applies;
    return ForwardingBackend::ApplyDense(quanta);
  }
  absl::Status ApplyCheckedDense(const v1::Update& msg) override {
    ++checked_dense_applies;
    return ForwardingBackend::ApplyCheckedDense(msg);
  }
  std::atomic<int> chunks{0};
  int dense_applies = 0;
  int checked_dense_applies = 0;
};

// The self-check runs on the replica's threads (the CPU backend's pool,
// three here), and refuses there what it refuses on one: onebit's and
// dyntree8's on the threads it lends, a dense emission's inside the
// replica's apply, in the same walk (ApplyCheckedDense, on the pool).
TEST_P(QuantaSelfCheck, ItRunsOnTheReplicasThreadsAndRefusesTheSame) {
  Fixture f;
  f.config.shape = *model::ModelShape::Parse("300,256,10", "relu");  // a 300 KiB payload
  f.config.threads = 3;
  f.initial = *model::InitialWeights(f.config.shape, f.config.fraction_bits, 1);
  auto counting = std::make_unique<CountingHostThreads>(*cpu::MakeCpuBackend(f.config));
  CountingHostThreads& own = *counting;
  f.own = std::move(counting);
  ASSERT_TRUE(f.own->LoadWeights(f.initial).ok());
  Publisher publisher(f.Options(/*with_sink=*/true));
  const uint64_t n = f.config.shape.param_count();
  QuantaEmitter emitter(f, GetParam());
  v1::Update encoded;
  std::vector<int64_t> quanta;
  emitter.Emit(&encoded, &quanta);
  SpoilValue(&encoded, &quanta, n - 3);  // in the last thread's chunk
  absl::StatusOr<Published> p = publisher.PublishQuanta(f.own.get(), encoded, quanta);
  ExpectRefusedNamingValue(p.status(), GetParam(), n - 3);
  // Onebit's and dyntree8's payloads, 1 and 8 bits a value, are below
  // Crc32cOnThreads' size: nothing is lent. A dense one is checked in its
  // apply, never applied unchecked.
  const bool dense = GetParam() == v1::CODEC_DENSE_FP32;
  EXPECT_EQ(own.chunks.load(), 0);
  EXPECT_EQ(own.checked_dense_applies, dense ? 1 : 0);
  EXPECT_EQ(own.dense_applies, 0);
  EXPECT_TRUE(f.sent.empty());
  EXPECT_EQ(*f.own->ReadWeights(), f.initial);
  emitter.Emit(&encoded, &quanta);
  const std::vector<int64_t> expected = codec::EmittedQuanta(encoded, quanta).ToVector();
  ASSERT_TRUE(publisher.PublishQuanta(f.own.get(), encoded, quanta).ok());
  EXPECT_EQ(own.checked_dense_applies, dense ? 2 : 0);
  EXPECT_EQ(own.dense_applies, dense ? 0 : 1);
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].decoded.decoded_quanta().ToVector(), expected);
  std::vector<int64_t> applied = f.initial;
  for (size_t i = 0; i < applied.size(); ++i) applied[i] += expected[i];
  EXPECT_EQ(*f.own->ReadWeights(), applied);
}

INSTANTIATE_TEST_SUITE_P(Codecs, QuantaSelfCheck,
                         ::testing::Values(v1::CODEC_ONEBIT, v1::CODEC_DYNTREE8,
                                           v1::CODEC_DENSE_FP32),
                         [](const auto& info) { return v1::Codec_Name(info.param); });

}  // namespace
}  // namespace reckon::worker
