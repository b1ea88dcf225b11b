#include "worker/peer_options.h"

#include <netdb.h>
#include <sys/socket.h>

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "server/tls.h"
#include "server/update_signature.h"

namespace reckon::worker {

absl::Status UseTls(const TlsFiles& files, PeerOptions* options) {
  if (files.ca.empty() && files.cert.empty() && files.key.empty()) return absl::OkStatus();
  if (files.ca.empty() || files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(files.all_names, " go together"));
  }
  absl::StatusOr<server::TlsConfig> tls = server::LoadTls(files.ca, files.cert, files.key);
  // A file missing, unreadable or not what it should be: a failure to run
  // (exit 1, as missing data), not a bad flag.
  if (!tls.ok()) return absl::FailedPreconditionError(tls.status().message());
  server::NodeOptions& n = options->node;
  if (tls->identity != n.node_id) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.cert_name, " ", files.cert, " is for '", tls->identity, "', not ",
                     files.node_id_name, " '", n.node_id, "': peers would refuse this worker"));
  }
  // Signs our Updates, verifies everyone's.
  absl::StatusOr<std::shared_ptr<server::UpdateSignatures>> signatures =
      server::MakeUpdateSignatures(*tls);
  if (!signatures.ok()) return absl::FailedPreconditionError(signatures.status().message());
  n.signatures = *std::move(signatures);
  options->transport.tls = *std::move(tls);
  n.require_peer_identity = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ResolvePeers(const std::string& list) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);  // "a:1, b:2" as written in a manifest
    const size_t colon = entry.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(entry.substr(colon + 1), &port) ||
        port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--peers entry '", entry, "' is not host:port"));
    }
    std::string host(entry.substr(0, colon));
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
      // Not resolvable yet (a peer's DNS record may come later): keep the
      // name; gRPC resolves it when dialing.
      if (seen.insert(std::string(entry)).second) out.emplace_back(entry);
      continue;
    }
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      char ip[NI_MAXHOST];
      if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof(ip), nullptr, 0, NI_NUMERICHOST) != 0) {
        continue;
      }
      const std::string address = a->ai_family == AF_INET6 ? absl::StrCat("[", ip, "]:", port)
                                                           : absl::StrCat(ip, ":", port);
      if (seen.insert(address).second) out.push_back(address);
    }
    freeaddrinfo(found);
  }
  return out;
}

}  // namespace reckon::worker
