// What the gossip service (grpc_transport.h: the Exchange, Snapshot and
// Status calls) needs of the node it serves, and nothing more: the link
// events of accepted streams, who may ask (fingerprint, token), and a source
// of snapshots, witnesses and status. ServicePort (service_port.h), the gossip node's service side,
// implements it; the transport knows only this, so it can serve another implementation (a test's
// stand-in) and the node's other methods stay out of its reach.
//
// Threads: every method is called from gRPC's threads or the service's own
// ("reckon-service"), concurrently; each implementation is thread-safe and
// none blocks for long. The LinkEvents reactions only enqueue (link.h).
#ifndef RECKON_SERVER_NODE_SERVICE_H_
#define RECKON_SERVER_NODE_SERVICE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codec/weight_checksum.h"
#include "proto/reckon.pb.h"
#include "server/link.h"
#include "server/version_vector.h"

namespace reckon::server {

using Clock = std::chrono::steady_clock;

class NodeService : public LinkEvents {
 public:
  // The service checks what it serves before it sends it: `weights` against
  // `checksum` (what the messages say), with weight_checksum().
  struct Snapshot {
    VersionMap applied;
    uint64_t checksum = 0;         // the messages' checksum at `applied`
    std::vector<int64_t> weights;  // empty unless asked for
    // The weights are not cut yet: a worker's training thread cuts its
    // replica at its next step boundary. Ask again (the service does, every
    // 100 ms, up to TransportOptions::training_cut_wait).
    bool pending = false;
  };

  const v1::ClusterFingerprint& fingerprint() const { return fingerprint_; }
  const std::string& node_id() const { return node_id_; }
  // The most origins a version vector may name here: --max-origins, plus
  // the members' current incarnations (they get in past the cap) and our
  // own. A request or heartbeat naming more is refused before a map of it is
  // built.
  size_t max_vector_origins() const { return max_vector_origins_; }
  // False until the node joined and started (streams are refused before,
  // and a snapshot probe is told "joining"). Lock-free.
  virtual bool started() const = 0;

  // Who may ask: the fingerprint and token of `peer` (a Hello's or a
  // Snapshot request's), or only the token (Status). Errors name the field
  // and both nodes.
  virtual absl::Status CheckPeer(const v1::ClusterFingerprint& theirs, const std::string& token,
                                 const std::string& peer) const = 0;
  virtual absl::Status CheckToken(const std::string& token) const = 0;

  // A consistent cut; `with_weights` copies the replica: one cut at or
  // after `asked_at` (steady clock), or `pending`.
  virtual Snapshot TakeSnapshot(bool with_weights, Clock::time_point asked_at) = 0;
  // The service measured a cut's weights before serving them: false (and
  // counted, logged, a re-join started) when they are not its checksum.
  virtual bool CheckSnapshotServed(const Snapshot& snapshot, uint64_t measured) = 0;
  virtual const codec::WeightChecksum& weight_checksum() const = 0;
  // A witness's answer: the replica checksum at `at` as this node's
  // messages give it (nullopt: not applied that far, or no longer known).
  virtual std::optional<uint64_t> ChecksumAt(const VersionMap& at) = 0;
  virtual VersionMap Applied() = 0;
  // A join by replay (docs/protocol.md section 5): what a probe's header
  // says. The SHA-256 of the initial weights this node's replica started
  // from (hex; empty once it installed a snapshot), and the bytes of the
  // messages `applied` names when its log holds every one of them from seq
  // 1 and they come to fewer than `limit` bytes (nullopt otherwise). The
  // defaults: it cannot serve a replay.
  struct Replay {
    std::string initial_sha256;
    std::optional<uint64_t> bytes;
  };
  virtual Replay ReplayOf(const VersionMap& applied, uint64_t limit) {
    (void)applied;
    (void)limit;
    return {};
  }
  // What the worker's model takes of raw features (an export's header);
  // empty until the worker has said (TrainingPort::SetInputStandardization).
  virtual v1::InputStandardization InputStandardization() = 0;
  // A worker admitted by CheckPeer asked for a snapshot: on its way in.
  virtual void NoteJoiner(const std::string& node_id, uint64_t incarnation) = 0;

  virtual void FillStatus(v1::NodeStatus* out, bool with_weight_hash) = 0;
  // Adds `n` to one of the node's counters (a NodeCounters field number).
  virtual void Count(int field_number, uint64_t n = 1) = 0;
  // One line on the node's log.
  virtual void Log(const std::string& line) = 0;

 protected:
  NodeService(v1::ClusterFingerprint fingerprint, std::string node_id, size_t max_vector_origins)
      : fingerprint_(std::move(fingerprint)),
        node_id_(std::move(node_id)),
        max_vector_origins_(max_vector_origins) {}

 private:
  const v1::ClusterFingerprint fingerprint_;
  const std::string node_id_;
  const size_t max_vector_origins_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_NODE_SERVICE_H_
