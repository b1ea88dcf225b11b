// reckonctl status --peer ADDR: a node's status (the gRPC Status call) as
// JSON: node id, incarnation, steps, version vector, weight hash, members
// with their state and lag, counters.
#include <google/protobuf/util/json_util.h>

#include <chrono>

#include "ctl/commands.h"
#include "ctl/flags.h"
#include "server/grpc_transport.h"

namespace reckon::ctl {

int RunStatusCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string peer;
  int64_t timeout_ms = 2000;
  FlagSet flags("reckonctl status");
  flags.String("peer", &peer, "host:port of a worker's gossip service");
  flags.Int("timeout-ms", &timeout_ms, "give up after this long");
  std::string tls_cert, tls_key, tls_ca;
  flags.String("tls-cert", &tls_cert, "with a TLS cluster: a certificate of its CA (PEM)");
  flags.String("tls-key", &tls_key, "its key (PEM)");
  flags.String("tls-ca", &tls_ca, "the cluster CA's certificate (PEM)");
  flags.Require("peer");
  if (int code = ParseFlagsOrExit(flags, args, out, err); code >= 0) return code;
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
      server::FetchStatus(peer, std::chrono::milliseconds(timeout_ms), tls);
  if (!status.ok()) {
    err << "reckonctl status: " << status.status().message() << "\n";
    return kExitBadInput;
  }
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(*status, &json, options).ok()) {
    err << "reckonctl status: cannot print the status as JSON\n";
    return kExitBadInput;
  }
  out << json;
  return kExitOk;
}

}  // namespace reckon::ctl
