// reckonctl export --checkpoint FILE | --peer HOST:PORT --format onnx|npz
// --out PATH: the trained network as other tools take it
// (ctl/model_export.h), from a worker's checkpoint or from a running
// worker's replica.
#include <chrono>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/flags.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"
#include "ctl/model_export.h"

ABSL_FLAG(std::string, checkpoint, "", "a worker's checkpoint (--checkpoint of reckon-worker)");

namespace reckon::ctl {

int RunExportCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl export",
                              {{"checkpoint"},
                               {"peer"},
                               {"format", "onnx"},
                               {"out", "", true},
                               {"timeout_ms", "60000"},
                               {"tls_cert"},
                               {"tls_key"},
                               {"tls_ca"},
                               {"cluster_token"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  const std::string format = absl::GetFlag(FLAGS_format), path = absl::GetFlag(FLAGS_out);
  const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint), peer = absl::GetFlag(FLAGS_peer);
  if (format != "onnx" && format != "npz") {
    err << "reckonctl export: --format " << format << ": give onnx or npz\n";
    return kExitUsage;
  }
  if (checkpoint.empty() == peer.empty()) {
    err << "reckonctl export: give --checkpoint FILE or --peer HOST:PORT (one of them)\n";
    return kExitUsage;
  }
  absl::StatusOr<server::TlsConfig> tls = ClientTlsFromFlags();
  if (!tls.ok()) {
    err << "reckonctl export: " << tls.status().message() << "\n";
    return kExitUsage;
  }
  const int64_t timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  if (timeout_ms < 1) {
    err << "reckonctl export: --timeout-ms must be >= 1\n";
    return kExitUsage;
  }
  absl::StatusOr<ExportedModel> model =
      checkpoint.empty() ? ModelFromPeer(peer, *tls, absl::GetFlag(FLAGS_cluster_token),
                                         std::chrono::milliseconds(timeout_ms))
                         : ModelFromCheckpoint(checkpoint);
  if (!model.ok()) {
    err << "reckonctl export: " << model.status().message() << "\n";
    return kExitFailed;
  }
  absl::StatusOr<std::string> bytes = format == "onnx" ? OnnxBytes(*model) : NpzBytes(*model);
  if (!bytes.ok()) {
    err << "reckonctl export: " << bytes.status().message() << "\n";
    return kExitFailed;
  }
  if (absl::Status s = base::WriteFileAtomically(path, *bytes); !s.ok()) {
    err << "reckonctl export: " << s.message() << "\n";
    return kExitFailed;
  }
  out << "exported " << model->shape.ToString() << " (weights " << model->weight_hash.substr(0, 16)
      << ", " << model->source << ") as " << format << " to " << path << " (" << bytes->size()
      << " bytes); raw features in, class probabilities out\n";
  return kExitOk;
}

}  // namespace reckon::ctl
