// reckonctl codec: encode a float32 residual into one Update, decode and
// inspect Update files. A file of one serialized Update is just the protobuf
// bytes (docs/wire.md §4).
#include <bit>
#include <cmath>
#include <cstring>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/files.h"
#include "base/flags.h"
#include "codec/fixed_point.h"
#include "codec/quantizer.h"
#include "codec/update_message.h"
#include "codec/update_words.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"

ABSL_FLAG(int64_t, fraction_bits, 32, "fixed-point fraction bits");
ABSL_FLAG(std::string, output, "", "where to write the serialized Update");
ABSL_FLAG(std::string, residual_out, "", "where to write the residual after emission");
ABSL_FLAG(std::string, node_id, "reckonctl", "origin node id");
ABSL_FLAG(int64_t, incarnation, 0, "origin incarnation");
ABSL_FLAG(int64_t, seq, 1, "sequence number");

namespace reckon::ctl {
namespace {

using ::reckon::base::ReadFile;
using ::reckon::base::WriteFileAtomically;

// A residual for a 2^31-parameter model is 8 GiB; refuse anything larger.
constexpr size_t kMaxResidualBytes = size_t{4} << 31;

int Fail(std::ostream& err, int code, const absl::Status& status) {
  err << "reckonctl codec: " << status.message() << "\n";
  return code;
}

int Encode(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl codec encode",
                              {{"input", "", true},
                               {"threshold", "", true},
                               {"format", "rice"},
                               {"fraction_bits"},
                               {"output", "", true},
                               {"residual_out"},
                               {"node_id"},
                               {"incarnation"},
                               {"seq"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  const std::string input = absl::GetFlag(FLAGS_input), output = absl::GetFlag(FLAGS_output),
                    residual_out = absl::GetFlag(FLAGS_residual_out),
                    format = absl::GetFlag(FLAGS_format), node_id = absl::GetFlag(FLAGS_node_id);
  const double threshold = absl::GetFlag(FLAGS_threshold);
  const int64_t fraction_bits = absl::GetFlag(FLAGS_fraction_bits),
                incarnation = absl::GetFlag(FLAGS_incarnation), seq = absl::GetFlag(FLAGS_seq);

  v1::Codec codec;
  if (format == "rice") {
    codec = v1::CODEC_THRESHOLD_RICE;
  } else if (format == "packed32") {
    codec = v1::CODEC_THRESHOLD_PACKED32;
  } else {
    return Fail(err, kExitUsage,
                absl::InvalidArgumentError(
                    absl::StrCat("--format: '", format, "' is not rice or packed32")));
  }
  if (incarnation < 0 || seq < 0) {
    return Fail(err, kExitUsage,
                absl::InvalidArgumentError("--incarnation and --seq must be non-negative"));
  }
  absl::StatusOr<codec::ThresholdStep> step =
      codec::MakeThresholdStep(threshold, static_cast<int>(fraction_bits));
  if (!step.ok()) return Fail(err, kExitUsage, step.status());

  absl::StatusOr<std::string> raw = ReadFile(input, kMaxResidualBytes);
  if (!raw.ok()) return Fail(err, kExitFailed, raw.status());
  if (raw->size() % 4 != 0) {
    return Fail(err, kExitFailed,
                absl::DataLossError(absl::StrCat(input, ": ", raw->size(),
                                                 " bytes is not a whole number of float32")));
  }
  std::vector<float> residual(raw->size() / 4);
  if (!raw->empty()) std::memcpy(residual.data(), raw->data(), raw->size());
  if constexpr (std::endian::native == std::endian::big) {
    for (float& f : residual)
      f = std::bit_cast<float>(__builtin_bswap32(std::bit_cast<uint32_t>(f)));
  }

  std::vector<uint32_t> words;
  if (absl::Status s = codec::QuantizeResidual(residual, *step, &words); !s.ok()) {
    return Fail(err, kExitFailed,
                absl::InvalidArgumentError(absl::StrCat(input, ": ", s.message())));
  }
  v1::Update msg;
  msg.mutable_origin()->set_node_id(node_id);
  msg.mutable_origin()->set_incarnation(static_cast<uint64_t>(incarnation));
  msg.set_seq(static_cast<uint64_t>(seq));
  if (absl::Status s =
          codec::EncodeThresholdUpdate(words, step->step_quanta, residual.size(), codec, &msg);
      !s.ok()) {
    return Fail(err, kExitFailed, s);
  }
  if (absl::Status s = WriteFileAtomically(output, msg.SerializeAsString()); !s.ok()) {
    return Fail(err, kExitFailed, s);
  }
  if (!residual_out.empty()) {
    std::string bytes(residual.size() * 4, '\0');
    if constexpr (std::endian::native == std::endian::big) {
      for (float& f : residual)
        f = std::bit_cast<float>(__builtin_bswap32(std::bit_cast<uint32_t>(f)));
    }
    if (!bytes.empty()) std::memcpy(bytes.data(), residual.data(), bytes.size());
    if (absl::Status s = WriteFileAtomically(residual_out, bytes); !s.ok()) {
      return Fail(err, kExitFailed, s);
    }
  }
  out << absl::StrFormat(
      "encoded %u updates of %d params (step %d quanta, tau %.9g) as %s: %u bytes\n", msg.count(),
      residual.size(), step->step_quanta, step->tau, v1::Codec_Name(codec), msg.ByteSizeLong());
  return kExitOk;
}

// Reads, parses and fully validates one Update file.
absl::Status LoadUpdate(const std::string& path, v1::Update* msg, codec::DecodedUpdate* decoded,
                        bool* parsed) {
  *parsed = false;
  absl::StatusOr<std::string> bytes = ReadFile(path, codec::kDefaultMaxUpdateBytes);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<v1::Update> parsed_msg = codec::ParseUpdate(*bytes);
  if (!parsed_msg.ok()) {
    return absl::Status(parsed_msg.status().code(),
                        absl::StrCat(path, ": ", parsed_msg.status().message()));
  }
  *msg = *std::move(parsed_msg);
  *parsed = true;
  if (absl::Status s = codec::DecodeUpdate(*msg, decoded); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  return absl::OkStatus();
}

// The flags of decode and inspect: just --input. Returns -1 to go on, else
// the exit code (base::ParseFlagsOrExit).
int ParseInputFlag(const std::string& command, const std::vector<std::string>& args,
                   std::ostream& out, std::ostream& err, std::string* input) {
  const base::FlagScope scope{command, {{"input", "", true}}};
  const int code = base::ParseFlagsOrExit(scope, args, out, err);
  *input = absl::GetFlag(FLAGS_input);
  return code;
}

int Decode(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string input;
  if (int code = ParseInputFlag("reckonctl codec decode", args, out, err, &input); code >= 0) {
    return code;
  }
  v1::Update msg;
  codec::DecodedUpdate decoded;
  bool parsed;
  if (absl::Status s = LoadUpdate(input, &msg, &decoded, &parsed); !s.ok()) {
    return Fail(err, kExitFailed, s);
  }
  // Validated as a whole before the first line is printed.
  std::string text;
  text.reserve(decoded.words.size() * 13);
  for (const uint32_t w : decoded.words) {
    absl::StrAppend(&text, codec::UpdateIndex(w), codec::UpdateIsNegative(w) ? " -\n" : " +\n");
  }
  out << text;
  return kExitOk;
}

int Inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string input;
  if (int code = ParseInputFlag("reckonctl codec inspect", args, out, err, &input); code >= 0) {
    return code;
  }
  v1::Update msg;
  codec::DecodedUpdate decoded;
  bool parsed;
  const absl::Status status = LoadUpdate(input, &msg, &decoded, &parsed);
  if (!parsed) return Fail(err, kExitFailed, status);
  // The header is shown even when the payload is corrupt: that is when it
  // is most wanted. The verdict is the last line, and the exit code.
  const int codec_number = msg.codec();
  const std::string codec_name = v1::Codec_IsValid(codec_number)
                                     ? v1::Codec_Name(static_cast<v1::Codec>(codec_number))
                                     : absl::StrCat("unknown (", codec_number, ")");
  out << "origin.node_id:       " << msg.origin().node_id() << "\n"
      << "origin.incarnation:   " << msg.origin().incarnation() << "\n"
      << "seq:                  " << msg.seq() << "\n"
      << "codec:                " << codec_name << "\n"
      << "param_count:          " << msg.param_count() << "\n"
      << "count:                " << msg.count() << "\n"
      << "rice_k:               " << msg.rice_k() << "\n"
      << "step_quanta:          " << msg.step_quanta() << "\n"
      << "crc32c:               " << absl::StrFormat("0x%08x", msg.crc32c()) << "\n"
      << "payload_bytes:        " << msg.payload().size() << "\n"
      << "message_bytes:        " << msg.ByteSizeLong() << "\n"
      << "bits_per_update:      " << absl::StrFormat("%.4f", codec::PayloadBitsPerUpdate(msg))
      << "\n"
      << "message_bits_per_update: "
      << absl::StrFormat("%.4f", msg.count() ? 8.0 * msg.ByteSizeLong() / msg.count() : 0.0) << "\n"
      << "density:              "
      << absl::StrFormat("%.6g", msg.param_count() ? double(msg.count()) / msg.param_count() : 0.0)
      << "\n";
  out.flush();
  if (!status.ok()) return Fail(err, kExitFailed, status);
  out << "valid:                yes\n";
  return kExitOk;
}

}  // namespace

int RunCodecCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string usage =
      "usage: reckonctl codec encode|decode|inspect [flags] (--help for flags)";
  if (args.empty()) {
    err << usage << "\n";
    return kExitUsage;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "encode") return Encode(rest, out, err);
  if (args[0] == "decode") return Decode(rest, out, err);
  if (args[0] == "inspect") return Inspect(rest, out, err);
  err << "reckonctl codec: unknown subcommand '" << args[0] << "'; " << usage << "\n";
  return kExitUsage;
}

}  // namespace reckon::ctl
