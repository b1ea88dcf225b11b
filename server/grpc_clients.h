// The blocking gRPC clients of the gossip service, each on a fresh channel
// with a deadline: a joining worker's probes, snapshot fetches and witness
// questions, and `reckonctl status`. Any thread; each call blocks its
// caller (threads of its own for the stripes of a snapshot).
#ifndef RECKON_SERVER_GRPC_CLIENTS_H_
#define RECKON_SERVER_GRPC_CLIENTS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/reckon.pb.h"
#include "server/grpc_credentials.h"
#include "server/version_vector.h"

namespace reckon::server {

// Blocking clients (join, reckonctl), each with a deadline.
// `cluster_token`: the cluster's (--cluster-token); a node that has one
// refuses a Status without it (kPermissionDenied).
absl::StatusOr<v1::NodeStatus> FetchStatus(const std::string& address,
                                           std::chrono::milliseconds timeout,
                                           const TlsConfig& tls = {},
                                           const std::string& cluster_token = "");

struct FetchedSnapshot {
  v1::SnapshotChunk::Header header;
  VersionMap applied;
  std::vector<int64_t> weights;  // empty when header_only
};
// `request.stripes()` > 1 asks for the snapshot in that many stripes, each
// fetched on its own connection, side by side (a source may serve fewer;
// one that does not stripe serves it whole). The header returned has the
// cut's id and stripe count. Errors: kUnavailable (unreachable, joining, the
// cut expired: try again or another), kFailedPrecondition /
// kPermissionDenied (the peer refused our fingerprint or token: fatal),
// kDataLoss (the weights do not match the header's SHA-256 or size, a
// stripe is not of its cut), kCancelled naming the address once `*stop`
// (when given) is set: the calls are cancelled within about 50 ms.
// `request.cut_id()` must be 0. A header-only request with `param_count` 0
// takes the header's count (reckonctl export learns it so).
absl::StatusOr<FetchedSnapshot> FetchSnapshot(const std::string& address,
                                              const v1::SnapshotRequest& request,
                                              uint64_t param_count,
                                              std::chrono::milliseconds timeout,
                                              const TlsConfig& tls = {},
                                              const std::atomic<bool>* stop = nullptr);

// A snapshot's source vouches for its own cut; before it is installed a
// witness confirms it (docs/protocol.md section 7, "Confirmed"): each of
// `witnesses` (other members) is asked, with `probe` (a header-only
// request) carrying `checksum_at = applied`, what its own messages say the
// replica checksum is there. OK once one says `checksum`. kDataLoss, naming
// the witness and both checksums, once one says another: the source lied
// (or its replica is not what its messages say). kUnavailable when none
// could tell within `timeout` (none has applied that far, or none
// answered): asked again every 100 ms until then. kCancelled once `*stop`
// (when given) is set.
absl::Status ConfirmCut(const VersionMap& applied, uint64_t checksum, const std::string& source,
                        const std::vector<std::string>& witnesses, v1::SnapshotRequest probe,
                        uint64_t param_count, std::chrono::milliseconds timeout,
                        const TlsConfig& tls = {}, const std::atomic<bool>* stop = nullptr);

}  // namespace reckon::server

#endif  // RECKON_SERVER_GRPC_CLIENTS_H_
