// The service's side of the gossip node (docs/architecture.md "The gossip
// node in parts"): what the gRPC service (grpc_transport.h: Exchange,
// Snapshot and Status calls), the HTTP endpoint's /status and /metrics
// (node_metrics.h), reckonctl's status and the transport's link reactions
// ask of the node. It implements NodeService (node_service.h) over the
// node's core (node_core.h); GossipNode::service() hands it out.
//
// Threads: gRPC's callback threads, the service's own ("reckon-service")
// and the HTTP endpoint's call it concurrently; every method is
// thread-safe and none blocks for long. A method takes the node's lock
// (NodeCore::mu) only to read or copy state: the replica's hash in
// FillStatus and a training cut's weights in TakeSnapshot are computed and
// copied off it. The link reactions take only the inbox's lock.
#ifndef RECKON_SERVER_SERVICE_PORT_H_
#define RECKON_SERVER_SERVICE_PORT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "proto/reckon.pb.h"
#include "server/link.h"
#include "server/node_core.h"
#include "server/node_service.h"
#include "server/version_vector.h"

namespace reckon::server {

// A status as the JSON `reckonctl status` and /status print: protobuf's
// JSON mapping, field names as in the proto, every field present.
std::string NodeStatusJson(const v1::NodeStatus& status);

class ServicePort final : public NodeService {
 public:
  // `core` outlives the port (GossipNode owns both).
  explicit ServicePort(NodeCore& core);
  ServicePort(const ServicePort&) = delete;
  ServicePort& operator=(const ServicePort&) = delete;

  // True once GossipNode::Start ran (streams are refused before). Lock-free.
  bool started() const override { return core_.started.load(); }
  const codec::WeightChecksum& weight_checksum() const override { return core_.checksum; }

  // A worker admitted by CheckPeer asked us for a snapshot (its join probe
  // or the weights): it is on its way in. Until it completes a handshake,
  // or for one failure timeout after its last request, this node does not
  // settle (it would end the cluster without that worker's shard), and
  // FillStatus lists it as "joining". Past max_members such workers, the
  // newest are not recorded.
  void NoteJoiner(const std::string& node_id, uint64_t incarnation) override;

  // --- link reactions (accepted and dialed streams; they only enqueue) ---
  void OnLinkUp(const std::shared_ptr<Link>& link) override;
  // False (the transport pauses the link) once the link's frames waiting
  // in the inbox exceed its share of inbox_byte_cap: the node thread
  // resumes it after handling what it took of the inbox.
  bool OnFrame(const std::shared_ptr<Link>& link, v1::GossipFrame frame) override;
  // Bytes of frames waiting in the inbox now (lock-free of the node's lock).
  size_t InboxBytes();
  void OnLinkClosed(const std::shared_ptr<Link>& link, const std::string& why) override;

  // --- status, snapshots, witnesses ---
  // The status `reckonctl status` and /status show. Without
  // `with_weight_hash` (a metrics scrape) the replica is neither copied nor
  // hashed: the cost stays independent of the model's size.
  void FillStatus(v1::NodeStatus* out, bool with_weight_hash = true) override;
  // Messages the most advanced live member it hears has applied that this
  // node has not (summed over origins): 0 when caught up.
  uint64_t MessagesBehind();
  // How long ago the node's event loop last ran (it runs at least every
  // heartbeat interval while the node is started).
  std::chrono::milliseconds LoopAge() const;
  // Ticks the node thread has run (heartbeats, timers, dials); nullopt once
  // stopping. For tests on a ManualClock: after the clock moves a heartbeat
  // interval, the tick that follows has run once this count grows.
  std::optional<uint64_t> TicksForTesting() const;
  // Inbox::IdleForTesting of the node's inbox: for tests on a ManualClock,
  // whether the node has handled all that reached it and ticked for the
  // clock's time (with the count of events that reached it), or not yet.
  std::optional<uint64_t> IdleForTesting();
  // A consistent cut. `with_weights` copies the replica (MiBs: a join's
  // probe needs only the vector).
  Snapshot TakeSnapshot(bool with_weights, Clock::time_point asked_at = {}) override;
  // The service measured a cut's weights before serving them: a mismatch
  // means this node's mirror is wrong. Counted and logged; the node then
  // re-joins from a peer (RejoinSource). Returns measured == snapshot.checksum.
  bool CheckSnapshotServed(const Snapshot& snapshot, uint64_t measured) override;
  // Checks the fingerprint and token of `peer` (its node id): an error naming
  // the field that differs and both nodes.
  absl::Status CheckPeer(const v1::ClusterFingerprint& theirs, const std::string& token,
                         const std::string& peer) const override;
  // The replica checksum at `at`, as the messages this node applied give it:
  // nullopt when it has not applied that far, or its ledger no longer
  // reaches back there (a snapshot's witness, docs/protocol.md section 7).
  std::optional<uint64_t> ChecksumAt(const VersionMap& at) override;
  // The addresses of the members alive now, but `except`: who may witness
  // a snapshot of `except`.
  std::vector<std::string> LiveMemberAddresses(const std::string& except);
  // kPermissionDenied unless `token` is the cluster's (always OK in a
  // cluster without one). Status calls check it; Hellos and Snapshot
  // requests go through CheckPeer, which checks it too.
  absl::Status CheckToken(const std::string& token) const override;

  // One line on stderr, "reckon-gossip[<node id>]: ...".
  void Log(const std::string& line) override;

  VersionMap Applied() override;
  Replay ReplayOf(const VersionMap& applied, uint64_t limit) override;
  // ReplayOf's initial_sha256: what this node's own join compares.
  std::string InitialSha256();
  v1::InputStandardization InputStandardization() override;
  // The SHA-256 of the replica at this node's vector, as the node knows it:
  // its mirror's where it keeps one; without one, the training replica's as
  // the node last settled with it at its current vector ("" if it has not:
  // the node never hashes a replica it does not hold). The mirror is copied
  // under the lock and hashed off it.
  std::string ReplicaHash();
  // The counters (proto/reckon.proto NodeCounters: one list, with each
  // one's help, for status, the worker's summary and /metrics).
  using Counters = v1::NodeCounters;
  Counters counters();
  // Adds `n` to one counter, for what the service sees (snapshots served or
  // expired, calls refused): e.g.
  // Count(Counters::kRequestsRefusedFieldNumber). Aborts on a field number
  // that is not a uint64 counter (a programming error).
  void Count(int field_number, uint64_t n = 1) override;

 private:
  // The counters and limits part of FillStatus.
  void FillCounters(v1::NodeStatus* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);

  NodeCore& core_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_SERVICE_PORT_H_
