// reckonctl status --peer ADDR: a node's status (the gRPC Status call) as
// JSON: node id, incarnation, steps, version vector, weight hash, members
// with their state and lag, counters.
#include <chrono>

#include "absl/flags/flag.h"
#include "base/flags.h"
#include "ctl/commands.h"
#include "server/grpc_clients.h"
#include "server/grpc_transport.h"
#include "server/node.h"

ABSL_FLAG(std::string, peer, "", "host:port of a worker's gossip service");
ABSL_FLAG(int64_t, timeout_ms, 2000, "give up after this long");
ABSL_FLAG(std::string, tls_cert, "", "with a TLS cluster: a certificate of its CA (PEM)");
ABSL_FLAG(std::string, tls_key, "", "its key (PEM)");
ABSL_FLAG(std::string, tls_ca, "", "the cluster CA's certificate (PEM)");
ABSL_FLAG(std::string, cluster_token, "",
          "the cluster's --cluster-token, when it has one (a worker refuses a status without it)");

namespace reckon::ctl {

int RunStatusCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl status",
                              {{"peer", "", true}, {"timeout_ms"}, {"tls_cert"}, {"tls_key"},
                               {"tls_ca"}, {"cluster_token"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  const std::string peer = absl::GetFlag(FLAGS_peer);
  const int64_t timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  const std::string tls_cert = absl::GetFlag(FLAGS_tls_cert), tls_key = absl::GetFlag(FLAGS_tls_key),
                    tls_ca = absl::GetFlag(FLAGS_tls_ca);
  server::TlsConfig tls;
  if (!tls_cert.empty() || !tls_key.empty() || !tls_ca.empty()) {
    absl::StatusOr<server::TlsConfig> loaded = server::LoadTls(tls_ca, tls_cert, tls_key);
    if (!loaded.ok()) {
      err << "reckonctl status: " << loaded.status().message() << "\n";
      return kExitUsage;
    }
    tls = *std::move(loaded);
  }
  absl::StatusOr<v1::NodeStatus> status =
      server::FetchStatus(peer, std::chrono::milliseconds(timeout_ms), tls,
                          absl::GetFlag(FLAGS_cluster_token));
  if (!status.ok()) {
    err << "reckonctl status: " << status.status().message() << "\n";
    return kExitBadInput;
  }
  out << server::NodeStatusJson(*status);
  return kExitOk;
}

}  // namespace reckon::ctl
