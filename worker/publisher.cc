#include "worker/publisher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/wall_clock.h"
#include "codec/codec.h"
#include "worker/metrics.h"

namespace reckon::worker {
Publisher::Publisher(PublisherOptions options) : options_(std::move(options)) {}

void Publisher::Number(v1::Codec codec, int64_t step_quanta) {
  // A message moved to the sink is left empty: the origin is set again.
  message_.mutable_origin()->set_node_id(options_.node_id);
  message_.mutable_origin()->set_incarnation(options_.incarnation);
  message_.set_seq(published_ + 1);
  if (options_.stamp_emitted)
    message_.set_emitted_unix_ns(static_cast<uint64_t>(base::UnixNanos()));
  decoded_.node_id = options_.node_id;
  decoded_.incarnation = options_.incarnation;
  decoded_.seq = published_ + 1;
  decoded_.codec = codec;
  decoded_.param_count = options_.param_count;
  decoded_.step_quanta = step_quanta;
}

absl::StatusOr<Published> Publisher::PublishThreshold(model::Replica* own,
                                                      std::span<const uint32_t> words,
                                                      const codec::ThresholdStep& step,
                                                      WordsFrom from) {
  RECKON_RETURN_IF_ERROR(codec::EncodeThresholdUpdate(words, step.step_quanta, options_.param_count,
                                                      options_.wire_codec, &message_));
  Number(options_.wire_codec, step.step_quanta);
  // The self-check: every peer applies what this message decodes to, so it
  // must be the emission itself, or the replicas part.
  RECKON_RETURN_IF_ERROR(codec::DecodeUpdate(message_, &decoded_));
  if (!std::equal(words.begin(), words.end(), decoded_.words.begin(), decoded_.words.end()) ||
      decoded_.step_quanta != step.step_quanta) {
    return absl::InternalError(
        absl::StrCat("seq ", published_ + 1, ": the encoded message decodes to ",
                     decoded_.words.size(), " words other than the ", words.size(), " emitted (",
                     codec::WireCodecLabel(options_.wire_codec), " encoder): not sent"));
  }
  if (own != nullptr) {
    RECKON_RETURN_IF_ERROR(from == WordsFrom::kLastEmission
                               ? own->ApplyOwnEmission(step.step_quanta, words)
                               : own->ApplyUpdates(step.step_quanta, words));
  }
  return Send(double(words.size()) / double(options_.param_count), step.tau);
}

absl::StatusOr<Published> Publisher::PublishQuanta(model::Replica* own, v1::Update& encoded,
                                                   std::vector<int64_t>& quanta) {
  if (const size_t values = codec::EmittedQuanta(encoded, quanta).size();
      values != options_.param_count) {
    return absl::InvalidArgumentError(absl::StrCat("a dense emission of ", values, " values for ",
                                                   options_.param_count, " parameters: not sent"));
  }
  const v1::Codec codec = encoded.codec();
  // The emission is taken, but buffers at their size go back for the next
  // step's encoder to overwrite (codec.h Encode): sized afresh each step, a
  // dense worker zeroed 8 bytes and 4 bytes a parameter it then overwrote,
  // 3.5% of its samples (docs/benchmarks.md). The payload that goes back
  // is the last message's: alone it is still here, at its size; a sink
  // took it with its message, and the encoder's buffer is then new.
  std::string payload_buffer;
  payload_buffer.swap(*message_.mutable_payload());
  message_.Clear();
  message_.set_codec(codec);
  message_.set_param_count(encoded.param_count());
  message_.set_count(encoded.count());
  message_.mutable_payload()->swap(*encoded.mutable_payload());
  message_.set_crc32c(encoded.crc32c());
  encoded.Clear();
  encoded.mutable_payload()->swap(payload_buffer);
  Number(codec, 0);
  decoded_.words.clear();
  decoded_.quanta.swap(quanta);
  // What every peer adds: the quanta, or a dense message's own payload
  // (codec::EmittedQuanta), from here on.
  const codec::QuantaSpan emitted = codec::EmittedQuanta(message_, decoded_.quanta);
  // The self-check, as for a threshold message: every peer adds what the
  // payload decodes to, so it must be the emission's quanta; a dense
  // message is its own decoded form, and the check is that every receiver
  // takes it (CRC, every value an integral number of quanta). The check
  // writes nothing (codec.h CheckQuantaPayload) and runs on the replica's
  // threads where it lends them; a dense message's is made in the walk
  // that applies it (model::Replica::ApplyCheckedDense, all or nothing),
  // not in a walk of its own. Its cost is in docs/benchmarks.md "The
  // publisher's self-check" and "The self-check in the apply".
  const bool check_in_apply = own != nullptr && emitted.is_dense_fp32();
  const absl::Status checked =
      check_in_apply ? own->ApplyCheckedDense(message_)
                     : codec::CheckQuantaUpdate(message_, emitted,
                                                own != nullptr ? own->HostThreads() : nullptr);
  if (!checked.ok()) {
    return absl::InternalError(absl::StrCat("seq ", published_ + 1,
                                            ": the encoded message does not decode to the "
                                            "emission (",
                                            codec::WireCodecLabel(codec),
                                            " encoder): not sent: ", checked.message()));
  }
  // The sink's decoded form of a dense message is a copy of its payload
  // (the message goes to the sink whole); alone, nobody reads it.
  if (emitted.is_dense_fp32() && options_.sink) {
    decoded_.dense_fp32.assign(message_.payload());
  } else {
    decoded_.dense_fp32.clear();
  }
  if (own != nullptr && !check_in_apply) RECKON_RETURN_IF_ERROR(own->ApplyDense(emitted));
  return Send(1.0, 0);
}

absl::StatusOr<Published> Publisher::Send(double density, double tau) {
  Published sent;
  sent.seq = published_ + 1;
  sent.updates = decoded_.dense() ? options_.param_count : decoded_.words.size();
  sent.wire_bytes = message_.ByteSizeLong();
  const v1::Codec codec = decoded_.codec;
  ++published_;
  if (options_.sink) RECKON_RETURN_IF_ERROR(options_.sink(std::move(message_), decoded_));
  if (options_.metrics != nullptr) {
    options_.metrics->OnEmitted(codec::WireCodecLabel(codec), sent.updates, sent.wire_bytes,
                                options_.param_count * sizeof(float), density, tau);
  }
  return sent;
}

}  // namespace reckon::worker
