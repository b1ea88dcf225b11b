// Training with peers: the gossip node (server/) behind the trainer's
// TrainingPeers interface. Owns the node and its gRPC server.
//
// Join (Create): listen, then probe every seed (a header-only snapshot
// request, which also checks the cluster fingerprint on both sides) until the
// answers are conclusive, and only then:
//   - some seed has applied messages: load a full snapshot from the most
//     advanced one that answered, once another seed that answered (and is
//     not joining) confirms its cut from its own messages; a seed whose
//     snapshot is contradicted is not asked again, and the worker probes
//     the others. A join by replay instead, when that seed's log holds its
//     whole cut in fewer bytes than the weights and the seeds that say so
//     started from our initial weights: start from them, and let the
//     members' logs send the cut's messages (anti-entropy), waited for
//     before the first step (kReplayWait without one arriving: then the
//     snapshot after all);
//   - every seed answered and none has trained (each is joining too, or
//     holds nothing), or --bootstrap: start from the seed's weights; but
//     with join_after_messages, keep probing until a seed has applied that
//     many messages.
// Silence is not evidence: while some seed does not answer and none that
// did has trained, the worker keeps probing with backoff and says so, up to
// `join_timeout` (0: for ever). A peer of another cluster stops the join
// with its reason. Then the node starts and dials the peers. The choice of
// source is JoinPlanner's (join_planner.h, tested without sockets); this
// class probes over gRPC, loads and confirms the snapshot.
//
// Threads: the training thread calls every method (Create on the thread
// that starts the worker); the node runs its own thread, the gRPC server
// its own. Errors: Create's are the join's (join_planner.h: kUnavailable
// after the join timeout, kCancelled on a stop, kFailedPrecondition for a
// peer of another cluster); BeforeStep's and Finish's stop the training
// (kInternal: the replica failed its check; kCancelled: stopped).
#ifndef RECKON_WORKER_GOSSIP_PEERS_H_
#define RECKON_WORKER_GOSSIP_PEERS_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/fault_link.h"
#include "server/grpc_clients.h"
#include "server/grpc_transport.h"
#include "server/node.h"
#include "worker/join_planner.h"
#include "worker/metrics.h"
#include "worker/peer_options.h"
#include "worker/trainer.h"

namespace reckon::worker {

class GossipPeers final : public TrainingPeers {
 public:
  // `initial`: the replica from the seed. `log`: join progress lines.
  static absl::StatusOr<std::unique_ptr<GossipPeers>> Create(PeerOptions options,
                                                             std::span<const int64_t> initial,
                                                             int fraction_bits, std::ostream& log);
  // Sends Leave, flushes, stops the node and the server.
  ~GossipPeers() override;

  absl::Status BeforeStep(model::Replica& replica, uint64_t steps_done) override;
  absl::Status Publish(v1::Update message, const codec::DecodedUpdate& decoded) override;
  absl::Status Finish(model::Replica& replica, uint64_t steps_done,
                      const std::atomic<bool>* stop) override;
  absl::Status Serve(model::Replica& replica, const std::atomic<bool>& stop,
                     const std::function<absl::Status()>& on_agreement) override;
  void DescribeInput(const InputTransform& input) override;
  int TrainingMembers() override;
  double PeerRoundTripSteps() override;
  bool HoldsMessages() override;
  uint64_t PublishedByEarlierLives() override;
  // The node, for status and metrics; valid while this object lives.
  // The address peers dial to reach this worker (--advertise, or --listen
  // with the port it got).
  const std::string& address() const { return options_.node.listen_address; }
  server::GossipNode* node() { return node_.get(); }
  base::Json VersionVector() override;
  base::Json Counters() override;

  // How long a join by replay waits without a message of the cut arriving
  // (after the node starts); then it loads the source's snapshot after all.
  static constexpr std::chrono::seconds kReplayWait{10};
  // The most a join by replay waits in all, as a snapshot's whole fetch.
  static constexpr std::chrono::seconds kReplayDeadline{60};

 private:
  GossipPeers() = default;
  absl::Status Apply(model::Replica& replica, server::Received& received);
  // At quiescence: OK when the backend's replica has the checksum the
  // messages it applied give; kInternal naming both otherwise.
  absl::Status CheckReplicaAtQuiescence(model::Replica& replica);
  // Calls `wait` (a node wait with a deadline; true: go on) until it says go
  // on, applying what arrives between calls.
  bool Stopped() const { return options_.stop != nullptr && options_.stop->load(); }
  absl::Status WaitApplying(model::Replica& replica,
                            const std::function<bool(server::Clock::time_point)>& wait);
  // Re-joins when the node asks, then applies what arrives until the cluster
  // is quiescent (OK) or `until` (kDeadlineExceeded).
  absl::Status ApplyUntilQuiescent(model::Replica& replica, server::Clock::time_point until);
  // Measures the training replica's checksum against what the messages it
  // applied say; on a mismatch re-joins from a live peer's snapshot.
  absl::Status CheckReplica(model::Replica& replica, uint64_t steps_done);
  // Loads `source`'s snapshot, once one of `witnesses` (another node than
  // the source: on a first join the other seeds that answered the probe, on
  // a re-join the live members; server::ConfirmCut) confirmed its cut:
  // kDataLoss when a witness's messages say otherwise, kUnavailable when
  // none could tell within 10 s. With nobody to ask (a lone seed, a cluster
  // of two) it is installed unwitnessed, and said so.
  absl::Status Rejoin(const std::string& source, const std::vector<std::string>& witnesses);
  // Re-joins when the node asks (RejoinRequired, or a failed check). A
  // source that does not answer, or whose snapshot lacks our own messages
  // while another live member has them, is not fatal: the node picks
  // another and the next call tries again.
  absl::Status RejoinIfAsked();
  // What this worker asks a peer's Snapshot call: its fingerprint, identity
  // and token; with `header_only`, the header alone (a join probe).
  v1::SnapshotRequest SnapshotRequest(bool header_only) const;
  // One header-only snapshot request to every seed, all at once (the join
  // planner's probe).
  SeedProbes ProbeSeeds(const std::vector<std::string>& seeds) const;
  // The first join: the planner finds the source (join_planner.h); this
  // loads its witnessed snapshot, joins by replay or starts from the
  // seed's weights.
  absl::Status JoinFromSeeds(const std::vector<std::string>& seeds);
  // After a contradiction, a source with no witness is not installed from:
  // waits a second (kUnavailable, naming the contradiction, once the join
  // has taken --join-timeout-s).
  absl::Status WaitForAWitness(const JoinPlanner& planner, server::Clock::time_point join_start,
                               const std::string& source, const std::set<std::string>& refused);
  // After a join by replay, once the node has started: waits until the node
  // has applied `replay_.replay_cut` (the members' logs send it); after
  // kReplayWait without progress, loads the source's snapshot instead.
  absl::Status AwaitReplay();

  PeerOptions options_;
  // Declared first, destroyed last: the node and the server's streams hold
  // its links until they are gone.
  std::unique_ptr<server::FaultInjector> faults_;
  std::unique_ptr<server::GossipServer> server_;
  std::unique_ptr<server::GossipNode> node_;
  std::ostream* log_ = nullptr;
  server::Clock::time_point next_check_{};
  // The first join's source when it joined by replay (AwaitReplay).
  JoinSource replay_;
  // Backend::WeightsWrapped as last counted into the node's weights_wrapped.
  uint64_t wrapped_counted_ = 0;
};

}  // namespace reckon::worker

#endif  // RECKON_WORKER_GOSSIP_PEERS_H_
