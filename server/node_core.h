// What the gossip node's sides share (docs/architecture.md "The gossip node in
// parts"): its options, its lock, and the parts under that lock. Three sides
// work on it, each a class of its own, split by who calls it:
//   - GossipNode (node.h): the node thread ("reckon-gossip"): every frame,
//     link event and tick; it also owns the core and the other sides;
//   - TrainingPort (training_port.h): the training thread: publish, take
//     what arrived, report, wait for backpressure and quiescence;
//   - ServicePort (service_port.h): the gRPC service's calls
//     (NodeService), /status and /metrics, and the link reactions.
// The core's methods are the questions more than one side asks of the state
// under the lock (quiescence, where to re-join from, who may ask).
//
// Threads: every field says how it may be read: constant after
// construction, thread-safe on its own, or guarded by `mu`. Methods marked
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) are called by whichever side holds it.
#ifndef RECKON_SERVER_NODE_CORE_H_
#define RECKON_SERVER_NODE_CORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "codec/weight_checksum.h"
#include "proto/reckon.pb.h"
#include "server/applied_state.h"
#include "server/early_arrivals.h"
#include "server/heartbeat_writer.h"
#include "server/inbox.h"
#include "server/member.h"
#include "server/member_links.h"
#include "server/message_log.h"
#include "server/node_counters.h"
#include "server/node_membership.h"
#include "server/node_options.h"
#include "server/quiescence.h"
#include "server/training_handoff.h"
#include "server/update_signatures.h"
#include "server/version_vector.h"

namespace reckon::server {

struct NodeCore {
  using Counters = v1::NodeCounters;

  // `options.clock` set; `clock_injected`: it was given (a test's clock),
  // so the inbox looks at it every millisecond.
  NodeCore(NodeOptions options, AppliedState state, bool clock_injected);
  NodeCore(const NodeCore&) = delete;
  NodeCore& operator=(const NodeCore&) = delete;

  // One line on stderr, "reckon-gossip[<node id>]: ...". Any thread.
  void Log(const std::string& line) const;
  // Protocol time (NodeOptions::clock). Any thread.
  Clock::time_point Now() const { return options.clock(); }

  // --- questions under the lock, asked by more than one side ---
  // This node's side of quiescence (quiescence.h), as of now.
  LocalQuiescence LocalQuiescenceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool SettledLocked(std::string* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool QuiescentLocked(std::string* why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Phase one recomputed (at a tick, or once the training thread hashed its
  // replica): the weight hash is taken when this node settles at a new
  // vector, and compared with every settled member's.
  void UpdateSettled() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Two settled at one vector with two hashes: a divergence (fatal).
  void CheckSettledHash(const Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The hash quiescence compares, at the current vector: the mirror's, or
  // the training replica's when it reported one there (else it is asked
  // for: nullopt).
  std::optional<std::string> SettledHashLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The best live member's address, `avoid` only when no other is alive:
  // one whose vector holds every message we published first (a snapshot
  // without them cannot be installed once our log let them go), then one
  // whose checks agreed with ours, then the most advanced.
  std::optional<std::string> RejoinSourceLocked(const std::string& avoid = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // How many of the messages we published `m` had not applied, as its last
  // heartbeat said: what --max-lag bounds and the round trip is read from.
  uint64_t OwnMessagesBehindLocked(const Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // A live member, its address not in `avoid`, whose vector has `origin`
  // at least at `first_retained - 1` (or that is `origin`'s own node): other
  // members first, `sender` last.
  std::optional<std::string> RejoinSourceFor(const OriginKey& origin, uint64_t first_retained,
                                             const std::string& sender,
                                             const std::set<std::string>& avoid)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Checks the fingerprint and token of `peer` (a Hello's or a Snapshot
  // request's node id): an error naming the field that differs and both
  // nodes. Any thread.
  absl::Status CheckPeer(const v1::ClusterFingerprint& theirs, const std::string& token,
                         const std::string& peer) const;
  // kPermissionDenied unless `token` is the cluster's (always OK in a
  // cluster without one). Any thread.
  absl::Status CheckToken(const std::string& token) const;
  // Counts (and logs, sparingly) what adding messages to the mirror found
  // (Mirror::AddQueued): weights wrapped past the int64 range, messages
  // that could not be added. The node thread, without mu.
  void CountMirrorReport(const Mirror::Report& report);

  // --- constant after construction ---
  const NodeOptions options;
  const OriginKey self;
  const LanePolicy lanes;  // from options
  // With TLS (NodeOptions::signatures): thread-safe, used off mu.
  UpdateSignatures* const signatures;
  const codec::WeightChecksum checksum;
  const uint64_t param_count;
  // The replica's mirror (null without one: NodeOptions::Replica::
  // kTrainingThread): thread-safe on its own (mirror.h), the same object
  // for the node's life; what `state` accepts, it queues.
  const std::shared_ptr<Mirror> mirror;

  // --- thread-safe on their own ---
  // Lock order: mu before the inbox's own lock, never the other way (the
  // node thread does not take mu while it waits in Inbox::Take). Link
  // reactions take only the inbox's, so a reaction run inline inside a Link
  // call made under mu cannot deadlock.
  Inbox inbox;
  // Counted without mu (node_counters.h): any thread.
  NodeCounterSet counters;
  // Set once GossipNode::Start ran (the service refuses streams before).
  std::atomic<bool> started{false};
  // When the node thread's loop last ran (steady clock, ns): LoopAge.
  std::atomic<int64_t> last_loop_ns{0};

  // --- guarded by mu ---
  mutable absl::Mutex mu;
  absl::CondVar changed;  // received, version vectors, member states
  bool stopping ABSL_GUARDED_BY(mu) = false;
  absl::Status fatal ABSL_GUARDED_BY(mu);
  // The mirror, the version vector and the checksum ledger, moving together
  // (applied_state.h).
  AppliedState state ABSL_GUARDED_BY(mu);
  EarlyArrivals early ABSL_GUARDED_BY(mu);
  MessageLog log ABSL_GUARDED_BY(mu);
  // The SHA-256 of the initial weights the replica started from (a join by
  // replay, ReplayOf); empty once a snapshot replaced them.
  std::string initial_sha256 ABSL_GUARDED_BY(mu);
  // Every other member, the streams waiting for their Hello, whom to dial,
  // the joiners, the failure detector's verdicts and the tree's ring
  // (node_membership.h).
  Membership membership ABSL_GUARDED_BY(mu);
  // The ticks, and our vector as the last tick's heartbeats said it
  // (heartbeat_writer.h).
  HeartbeatWriter heartbeats ABSL_GUARDED_BY(mu);
  // What the training thread applies and reports, and where a re-join
  // fetches from (training_handoff.h).
  TrainingHandoff handoff ABSL_GUARDED_BY(mu);
  // The re-join a RejoinRequired asked for, while it is pending: what we
  // lack, who said so, and the sources that refused it.
  struct RejoinWant {
    OriginKey origin;
    uint64_t first_retained = 0;
    std::string sender;
    std::set<std::string> refused;  // addresses
  };
  std::optional<RejoinWant> rejoin_want ABSL_GUARDED_BY(mu);
  // Our last message's seq (TrainingPort::Publish).
  uint64_t last_published ABSL_GUARDED_BY(mu) = 0;
  // Our messages published and not pushed yet (GossipNode::PushPublished).
  std::vector<std::shared_ptr<const v1::GossipFrame>> to_push ABSL_GUARDED_BY(mu);
  // Phase one of quiescence as last computed, the vector it held at, and
  // the replica's SHA-256 there.
  Settlement settlement ABSL_GUARDED_BY(mu);
  v1::InputStandardization input ABSL_GUARDED_BY(mu);

 private:
  mutable absl::Mutex log_mu_;  // one line at a time on stderr
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_NODE_CORE_H_
