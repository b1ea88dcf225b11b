#include "codec/update_message.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/codec.h"
#include "codec/codec_payload.h"
#include "codec/crc32c.h"
#include "codec/packed32.h"
#include "codec/rice.h"
#include "codec/update_words.h"

namespace reckon::codec {

absl::Status EncodeThresholdUpdate(std::span<const uint32_t> words, int64_t step_quanta,
                                   uint64_t param_count, v1::Codec codec, v1::Update* msg) {
  if (step_quanta <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("step_quanta ", step_quanta, " must be > 0"));
  }
  RECKON_RETURN_IF_ERROR(ValidateUpdateWords(words, param_count));
  std::string* payload = msg->mutable_payload();
  switch (codec) {
    case v1::CODEC_THRESHOLD_PACKED32:
      EncodePacked32(words, payload);
      msg->set_rice_k(0);
      break;
    case v1::CODEC_THRESHOLD_RICE: {
      const uint32_t k = OptimalRiceK(words);
      EncodeRice(words, k, payload);
      msg->set_rice_k(k);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("codec ", v1::Codec_Name(codec), " is not a threshold codec"));
  }
  msg->set_codec(codec);
  msg->set_param_count(param_count);
  msg->set_count(static_cast<uint32_t>(words.size()));
  msg->set_step_quanta(step_quanta);
  msg->set_crc32c(Crc32c(*payload));
  return absl::OkStatus();
}

absl::StatusOr<v1::Update> ParseUpdate(std::string_view bytes, size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("update message is ", bytes.size(), " bytes, above the limit of ", max_bytes));
  }
  v1::Update msg;
  if (!msg.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError(
        absl::StrCat("not a valid reckon.v1.Update protobuf (", bytes.size(), " bytes)"));
  }
  return msg;
}

namespace {

// The refusal of a payload whose CRC-32C is `crc`, where msg says another.
absl::Status CheckCrc(uint32_t crc, const v1::Update& msg) {
  return payload::CheckPayloadCrc(crc, msg.crc32c());
}

// docs/wire-codecs.md 2: the header of a quanta-codec message, but its CRC.
absl::Status CheckQuantaFields(const v1::Update& msg) {
  const std::string name = v1::Codec_Name(msg.codec());
  if (msg.param_count() > kMaxParamCount) {
    return absl::DataLossError(absl::StrCat("param_count ", msg.param_count(), " exceeds 2^31"));
  }
  if (msg.count() != msg.param_count()) {
    return absl::DataLossError(
        absl::StrCat(name, ": count ", msg.count(), " is not param_count ", msg.param_count()));
  }
  if (msg.step_quanta() != 0 || msg.rice_k() != 0) {
    return absl::DataLossError(absl::StrCat(name, ": step_quanta and rice_k must be 0"));
  }
  return absl::OkStatus();
}

// A dense message's payload in one pass (codec_payload.h
// CheckDenseFp32Payload): its length, then its CRC, then its values, each
// block handed to `sink` as it passes.
absl::Status CheckDensePayload(const v1::Update& msg, const payload::DenseFp32BlockSink& sink,
                               const ParallelFor& parallel_for) {
  RECKON_RETURN_IF_ERROR(
      payload::CheckLength("dense fp32", msg.payload().size(), 4 * msg.param_count()));
  return payload::CheckDenseFp32Payload(msg.payload(), msg.crc32c(), sink, parallel_for);
}

// The header, then the payload.
absl::Status DecodeQuantaUpdate(const v1::Update& msg, DecodedUpdate* out) {
  RECKON_RETURN_IF_ERROR(CheckQuantaFields(msg));
  if (msg.codec() == v1::CODEC_DENSE_FP32) {
    // Its own decoded form: copied as it is checked, in one pass (4 bytes
    // a value kept, not an int64 copy's 8). Sized only once its length is
    // known to be the model's.
    RECKON_RETURN_IF_ERROR(
        payload::CheckLength("dense fp32", msg.payload().size(), 4 * msg.param_count()));
    out->dense_fp32.resize(msg.payload().size());
    char* copy = out->dense_fp32.data();
    payload::DenseFp32BlockSink copy_blocks;
    copy_blocks.take = [copy](size_t first, size_t len, const char* at) {
      std::memcpy(copy + 4 * first, at, 4 * len);
    };
    if (absl::Status s = CheckDensePayload(msg, copy_blocks, nullptr); !s.ok()) {
      out->dense_fp32.clear();
      return s;
    }
  } else {
    RECKON_RETURN_IF_ERROR(CheckCrc(Crc32c(msg.payload()), msg));
    RECKON_RETURN_IF_ERROR(DecodeQuantaPayload(msg, &out->quanta));
  }
  out->node_id = msg.origin().node_id();
  out->incarnation = msg.origin().incarnation();
  out->seq = msg.seq();
  out->codec = msg.codec();
  out->param_count = msg.param_count();
  out->step_quanta = 0;
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckQuantaUpdate(const v1::Update& msg, QuantaSpan quanta,
                               const ParallelFor& parallel_for) {
  if (!IsQuantaCodec(msg.codec())) {
    return absl::InternalError(absl::StrCat(v1::Codec_Name(msg.codec()), " is not a quanta codec"));
  }
  RECKON_RETURN_IF_ERROR(CheckQuantaFields(msg));
  if (msg.codec() != v1::CODEC_DENSE_FP32) {
    RECKON_RETURN_IF_ERROR(CheckCrc(Crc32cOnThreads(msg.payload(), parallel_for), msg));
    return CheckQuantaPayload(msg, quanta, parallel_for);
  }
  // A dense message checked against its own payload (the publisher's
  // self-check) is the receivers' check: one pass. Against other quanta,
  // a comparing walk follows.
  RECKON_RETURN_IF_ERROR(CheckDensePayload(msg, {}, parallel_for));
  if (quanta.is_dense_fp32() && quanta.dense_fp32_bytes() == msg.payload().data() &&
      quanta.size() == msg.param_count()) {
    return absl::OkStatus();
  }
  return CheckQuantaPayload(msg, quanta, parallel_for);
}

absl::Status CheckAndApplyDenseUpdate(const v1::Update& msg, FixedPointReplica* replica,
                                      const ParallelFor& parallel_for) {
  if (msg.codec() != v1::CODEC_DENSE_FP32) {
    return absl::InternalError(
        absl::StrCat(v1::Codec_Name(msg.codec()), " is not the dense codec"));
  }
  RECKON_RETURN_IF_ERROR(CheckQuantaFields(msg));
  RECKON_RETURN_IF_ERROR(
      payload::CheckLength("dense fp32", msg.payload().size(), 4 * msg.param_count()));
  return replica->ApplyCheckedDenseFp32(msg.payload(), msg.crc32c(), parallel_for);
}

absl::Status DecodeUpdate(const v1::Update& msg, DecodedUpdate* out) {
  out->words.clear();
  out->quanta.clear();
  out->dense_fp32.clear();
  const int codec = msg.codec();
  switch (codec) {
    case v1::CODEC_THRESHOLD_PACKED32:
    case v1::CODEC_THRESHOLD_RICE:
      break;
    case v1::CODEC_ONEBIT:
    case v1::CODEC_DYNTREE8:
    case v1::CODEC_DENSE_FP32:
      return DecodeQuantaUpdate(msg, out);
    default:
      return absl::DataLossError(absl::StrCat("unknown codec ", codec));
  }
  if (msg.param_count() > kMaxParamCount) {
    return absl::DataLossError(absl::StrCat("param_count ", msg.param_count(), " exceeds 2^31"));
  }
  if (msg.step_quanta() <= 0) {
    return absl::DataLossError(absl::StrCat("step_quanta ", msg.step_quanta(), " must be > 0"));
  }
  if (msg.count() > msg.param_count()) {
    return absl::DataLossError(
        absl::StrCat("count ", msg.count(), " exceeds param_count ", msg.param_count()));
  }
  if (codec == v1::CODEC_THRESHOLD_RICE && msg.rice_k() > kMaxRiceK) {
    return absl::DataLossError(absl::StrCat("rice_k ", msg.rice_k(), " exceeds 30"));
  }
  RECKON_RETURN_IF_ERROR(CheckCrc(Crc32c(msg.payload()), msg));
  if (codec == v1::CODEC_THRESHOLD_RICE) {
    RECKON_RETURN_IF_ERROR(
        DecodeRice(msg.payload(), msg.count(), msg.rice_k(), msg.param_count(), &out->words));
  } else {
    RECKON_RETURN_IF_ERROR(
        DecodePacked32(msg.payload(), msg.count(), msg.param_count(), &out->words));
  }
  out->node_id = msg.origin().node_id();
  out->incarnation = msg.origin().incarnation();
  out->seq = msg.seq();
  out->codec = static_cast<v1::Codec>(codec);
  out->param_count = msg.param_count();
  out->step_quanta = msg.step_quanta();
  return absl::OkStatus();
}

absl::Status ApplyDecoded(const DecodedUpdate& update, FixedPointReplica* replica,
                          FixedPointReplica::Prefetch prefetch,
                          const FixedPointReplica::ParallelFor& parallel_for) {
  if (update.dense()) return replica->ApplyDense(update.decoded_quanta(), parallel_for);
  return replica->Apply(update.step_quanta, update.words, prefetch, parallel_for);
}

uint64_t ChecksumContribution(const WeightChecksum& checksum, const DecodedUpdate& update) {
  if (update.dense()) return checksum.Of(update.decoded_quanta());
  return checksum.OfUpdate(update.step_quanta, update.words);
}

double PayloadBitsPerUpdate(const v1::Update& msg) {
  return msg.count() == 0 ? 0.0 : 8.0 * msg.payload().size() / msg.count();
}

}  // namespace reckon::codec
