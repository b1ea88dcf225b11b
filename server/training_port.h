// The training thread's side of the gossip node (docs/architecture.md "The
// gossip node in parts"): what a worker's training loop, the PyTorch peer
// and the synthetic member call between and after their steps. It publishes
// our own updates, hands over what the node accepted, takes the replica's
// checks and cuts, holds the loop back while peers lag or our backlog is
// over its cap, says where to re-join from, and waits for quiescence.
//
// Threads: one training thread calls it (GossipNode::training()); each
// method takes the node's lock (NodeCore::mu) for as long as it reads or
// writes the shared state, never while it encodes, signs or waits on the
// caller's `drain`. The blocking calls (WaitWhileLagging,
// WaitWhileBacklogged, WaitQuiescent) take a deadline and return when the
// node stops. Errors: Publish's kInternal for a seq out of order;
// WaitQuiescent's kDataLoss (a divergence), kDeadlineExceeded, or `drain`'s
// and `replica_hash`'s own.
#ifndef RECKON_SERVER_TRAINING_PORT_H_
#define RECKON_SERVER_TRAINING_PORT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codec/update_message.h"
#include "proto/reckon.pb.h"
#include "server/node_core.h"
#include "server/training_handoff.h"
#include "server/version_vector.h"

namespace reckon::server {

class TrainingPort {
 public:
  // `core` outlives the port (GossipNode owns both).
  explicit TrainingPort(NodeCore& core) : core_(core) {}
  TrainingPort(const TrainingPort&) = delete;
  TrainingPort& operator=(const TrainingPort&) = delete;

  // Our own update (already applied to the backend by the caller): applied
  // to the mirror and logged here; the node thread pushes it to every peer
  // (GossipNode::PushPublished) right after. Never blocks on peers: a full send queue
  // drops the frame and anti-entropy repairs it later.
  // REQUIRES: update.seq() is the previous Publish's seq + 1 (first: 1).
  // `decoded` is `update` decoded (the caller has it already). The message
  // is taken (moved into the frame that goes out: no copy of its payload).
  absl::Status Publish(v1::Update update, const codec::DecodedUpdate& decoded);
  // Moves out what arrived since the last call; `with_cut` also copies the
  // version vector (for a replica check). Without a mirror, when a
  // snapshot waits for the training replica, Received::weights_wanted is
  // set (and the cut copied): once it is applied, the caller copies its
  // replica's weights to OfferTrainingCut.
  Received TakeReceived(bool with_cut = false);
  // The training replica's weights once it applied everything up to `at`
  // (Received::cut) whose checksum is `checksum` (Received::checksum): the
  // snapshots asked for since are served from them (NodeOptions::Replica::
  // kTrainingThread). Kept kTrainingCutKept for the snapshots asked meanwhile.
  void OfferTrainingCut(VersionMap at, uint64_t checksum, std::vector<int64_t> weights);
  static constexpr std::chrono::seconds kTrainingCutKept{5};
  // The training thread measured its replica after applying everything up
  // to `at` (Received::cut): `measured` against `expected`
  // (Received::checksum), in `ms`. Counted; a passed check is announced to
  // peers in the next heartbeat, a failed one logged loudly.
  void RecordReplicaCheck(const VersionMap& at, uint64_t measured, uint64_t expected, double ms);
  // Where to re-join from after a failed check: the address of a live peer,
  // preferring those whose checks agreed with our messages and never
  // diverged, then the most advanced. nullopt when none is alive.
  std::optional<std::string> RejoinSourceAfterFailedCheck();
  void CountRejoinAfterFailedCheck();
  // Blocks while some alive peer has applied fewer than our seq - max_lag
  // of our messages (as its last heartbeat said), up to `deadline`; the time
  // spent waiting is counted (lag_wait_ms). Returns true when it may go on.
  bool WaitWhileLagging(uint64_t max_lag, Clock::time_point deadline);
  // Blocks while our backlog (own messages some live peer has not applied)
  // is over NodeOptions::max_backlog_bytes, up to `deadline`; the time
  // spent waiting is counted (backpressure_ms). Returns true when it may go on.
  bool WaitWhileBacklogged(Clock::time_point deadline);
  size_t OwnBacklogBytes();
  void SetTrainingDone(uint64_t local_steps);
  // Members still training, this node included while it is: the alive
  // peers that have not said training_done, plus one. A peer not reached
  // yet does not count (it may never come).
  int TrainingMembers();
  // The round trip to the alive peers in our own steps: the median over
  // those measured of lag_at_heartbeat - 1 (Member; less the one step a
  // message is late in any case as the heartbeat is read), within [0,
  // kMaxRoundTripSteps]. Negative while no peer is measured (none has said
  // yet that it applied one of ours). What a link's latency adds to the
  // staleness the momentum rule assumes (model::MatchMomentumToCluster).
  // The median and the bound: a member's heartbeats are its word
  // (docs/gossip.md "A member of a token cluster").
  static constexpr double kMaxRoundTripSteps = 100;
  double PeerRoundTripSteps();
  void SetLocalSteps(uint64_t steps);
  // Blocks until the cluster is quiescent or `deadline`; `drain` is called
  // with what arrives meanwhile, on the calling thread. Quiescent is a
  // cluster-wide agreement in two phases (docs/protocol.md "Quiescence"):
  // this node is settled (done, nothing left to apply, it reached the
  // cluster, every live member it knows finished at its version vector),
  // and every live member it knows reported itself settled at the same
  // vector with the same weight hash. A member settled at the same vector
  // with another hash is a divergence: kDataLoss, naming both.
  // Without a mirror the training thread also serves, from here, what the
  // node needs of its replica while it waits: `drain` gets a Received with
  // weights_wanted for a snapshot, and `replica_hash` (required then) is
  // called, with everything taken applied, for the SHA-256 this node
  // settles with.
  absl::Status WaitQuiescent(
      Clock::time_point deadline, const std::function<absl::Status(Received&)>& drain,
      const std::function<absl::StatusOr<std::string>()>& replica_hash = nullptr);
  // A peer told us we fell out of its log: the address to re-join from.
  std::optional<std::string> RejoinSource();
  // Fetching or installing the snapshot from `source` (RejoinSource) failed:
  // without an answer (gone, or too busy), it lacked our own messages that
  // our log no longer holds (`need_our_messages`), or `source` refused the
  // call (`refused`: not our fault, we are a member; a refusal changes only
  // what the refuser owns). The next attempt goes to another live member:
  // for a re-join a RejoinRequired asked, one whose vector holds what we
  // lack (GossipNode::HandleRejoinRequired); otherwise chosen as RejoinSourceAfterFailedCheck does.
  // Returns whether it switched to one (with `need_our_messages`: to one
  // whose vector holds every message we published), or dropped the re-join
  // (none left to ask after a refusal, or a RejoinRequired's with none left
  // at all: counted, rejoins_ignored).
  bool RejoinFailed(const std::string& source, bool need_our_messages, bool refused = false);
  // The worker's standardization of raw features, once its data is read:
  // what an export (SnapshotRequest.for_export) serves with the weights.
  void SetInputStandardization(v1::InputStandardization input);

 private:
  // What the training thread takes (TakeReceived, WaitQuiescent): the cut
  // copied when asked or when a snapshot waits for the training replica.
  Received TakeLocked(bool with_cut) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // How many of our messages the live peer furthest behind lacks.
  uint64_t MaxPeerLagLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // Bytes of our messages some live peer has not applied, and the cap on
  // them (NodeOptions::max_backlog_bytes, else a share of the log's cap).
  size_t OwnBacklogBytesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  size_t MaxBacklogBytesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // The one wait of WaitWhileLagging and WaitWhileBacklogged: while `hold`
  // says so, up to `deadline` or the node stopping (false), waking on every
  // change; the milliseconds waited are added to the counter `counter_field`.
  bool WaitCountedLocked(absl::FunctionRef<bool()> hold, Clock::time_point deadline,
                         int counter_field) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);

  NodeCore& core_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_TRAINING_PORT_H_
