// reckonctl status --peer ADDR: a node's status (the gRPC Status call) as
// JSON: node id, incarnation, steps, version vector, weight hash, members
// with their state and lag, counters.
#include <chrono>

#include "absl/flags/flag.h"
#include "base/flags.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"
#include "server/grpc_clients.h"
#include "server/grpc_transport.h"
#include "server/node.h"

namespace reckon::ctl {

int RunStatusCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl status",
                              {{"peer", "", true},
                               {"timeout_ms"},
                               {"tls_cert"},
                               {"tls_key"},
                               {"tls_ca"},
                               {"cluster_token"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  const std::string peer = absl::GetFlag(FLAGS_peer);
  const int64_t timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  absl::StatusOr<server::TlsConfig> tls = ClientTlsFromFlags();
  if (!tls.ok()) {
    err << "reckonctl status: " << tls.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<v1::NodeStatus> status = server::FetchStatus(
      peer, std::chrono::milliseconds(timeout_ms), *tls, absl::GetFlag(FLAGS_cluster_token));
  if (!status.ok()) {
    err << "reckonctl status: " << status.status().message() << "\n";
    return kExitFailed;
  }
  out << server::NodeStatusJson(*status);
  return kExitOk;
}

}  // namespace reckon::ctl
