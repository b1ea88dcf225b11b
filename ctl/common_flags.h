// Flags more than one reckonctl subcommand takes (base/flags.h parses them;
// each subcommand's own flags are defined in its file). A subcommand gives
// its own default in its FlagScope where the meaning differs.
//
// Threads: read on reckonctl's main thread. Errors: a bad value is a usage
// error naming the flag.
#ifndef RECKON_CTL_COMMON_FLAGS_H_
#define RECKON_CTL_COMMON_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "server/tls.h"

ABSL_DECLARE_FLAG(bool, json);           // every bench: JSON instead of a table
ABSL_DECLARE_FLAG(int64_t, steps);       // bench train, bench transport
ABSL_DECLARE_FLAG(double, threshold);    // bench train, codec encode
ABSL_DECLARE_FLAG(int64_t, workers);     // local, lab
ABSL_DECLARE_FLAG(std::string, link);    // local, lab: a LinkShape
ABSL_DECLARE_FLAG(int64_t, link_mtu);    // local, lab
ABSL_DECLARE_FLAG(std::string, out);     // certs, export
ABSL_DECLARE_FLAG(std::string, format);  // codec encode, export
ABSL_DECLARE_FLAG(std::string, input);   // codec, predict
// status, export --peer: a worker's gossip service, and what it asks of us.
ABSL_DECLARE_FLAG(std::string, peer);
ABSL_DECLARE_FLAG(int64_t, timeout_ms);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, cluster_token);

namespace reckon::ctl {
// --tls-cert, --tls-key, --tls-ca loaded (none given: no TLS); an error
// names the file.
absl::StatusOr<server::TlsConfig> ClientTlsFromFlags();
}  // namespace reckon::ctl

#endif  // RECKON_CTL_COMMON_FLAGS_H_
