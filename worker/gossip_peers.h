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
// with its reason. Then the node starts and dials the peers.
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
#include "worker/metrics.h"
#include "worker/trainer.h"

namespace reckon::worker {

struct PeerOptions {
  server::NodeOptions node;     // node_id, incarnation, seeds, fingerprint, timeouts
  server::FaultOptions faults;  // test only: links that misbehave (fault_link.h)
  std::string listen = "0.0.0.0:7070";
  std::string advertise;  // how peers reach us; default: listen, with this host's name
                          // in place of 0.0.0.0
  server::TransportOptions transport;
  uint64_t max_lag = 0;  // 0: never pause
  std::chrono::seconds quiesce_timeout{600};
  std::chrono::milliseconds join_probe_timeout{2000};
  // Start a new cluster from the seed's weights when no seed has trained,
  // even if some did not answer (the first worker of a cluster whose other
  // members are not up yet, with no way to know they will not have trained).
  bool bootstrap = false;
  // A first join may be a join by replay (see above; --join-by-replay).
  bool join_by_replay = true;
  // Join only from a seed that has applied at least this many messages,
  // never from the seed's weights, however the seeds answer (0: the rules
  // above). The workers other than shard 0's when the cluster pre-trains
  // (--pretrain-samples: 1, the start that shard 0 publishes, so no worker
  // steps from the seed's weights), and the workers that join after the
  // first-epoch warm-up (--start-workers: the warm-up's messages).
  uint64_t join_after_messages = 0;
  std::string join_after_why;            // for the log and the timeout's error
  std::chrono::seconds join_timeout{0};  // 0: probe for ever
  // The running replica check (docs/gossip.md "Divergence detection"):
  // this often at least, stretched so that it takes at most 1% of the time.
  // 0: never.
  std::chrono::milliseconds check_interval{2000};
  // Where the apply latency of peers' updates is recorded (null: nowhere).
  WorkerMetrics* metrics = nullptr;
  // Set (SIGTERM): every wait ends promptly. The join returns kCancelled;
  // Finish returns kCancelled when the cluster had not agreed yet (null:
  // never).
  const std::atomic<bool>* stop = nullptr;
};

// Mutual TLS and signed updates from PEM files (reckon-worker's --tls-ca,
// --tls-cert, --tls-key; a Python peer's tls_ca, tls_cert, tls_key): all
// three or none (none: nothing changes). The certificate must name the
// node id, or peers would refuse it. Errors call the files and the node id
// by the caller's names: kInvalidArgument for the flags (not all three, a
// certificate of another node), kFailedPrecondition for a file missing,
// unreadable or not a valid certificate or key.
struct TlsFiles {
  std::string ca, cert, key;
  std::string cert_name = "--tls-cert";
  std::string all_names = "--tls-cert, --tls-key and --tls-ca";
  std::string node_id_name = "--node-id";
};
absl::Status UseTls(const TlsFiles& files, PeerOptions* options);

// "host:port,host:port" (a host may be a DNS name resolving to several
// addresses, e.g. a Kubernetes headless Service): every address, as
// "ip:port". kInvalidArgument for an entry without a port.
absl::StatusOr<std::vector<std::string>> ResolvePeers(const std::string& list);

class GossipPeers final : public TrainingPeers {
 public:
  // `initial`: the replica from the seed. `log`: join progress lines.
  static absl::StatusOr<std::unique_ptr<GossipPeers>> Create(PeerOptions options,
                                                             std::span<const int64_t> initial,
                                                             int fraction_bits, std::ostream& log);
  // Sends Leave, flushes, stops the node and the server.
  ~GossipPeers() override;

  absl::Status BeforeStep(model::Backend& backend, uint64_t steps_done) override;
  absl::Status Publish(const v1::Update& message, const codec::DecodedUpdate& decoded) override;
  absl::Status Finish(model::Backend& backend, uint64_t steps_done,
                      const std::atomic<bool>* stop) override;
  absl::Status Serve(model::Backend& backend, const std::atomic<bool>& stop,
                     const std::function<absl::Status()>& on_agreement) override;
  void DescribeInput(const InputTransform& input) override;
  int TrainingMembers() override;
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
  // Whether a first join may start from its own initial weights (SHA-256
  // hex `own_initial`) and be sent the cut of probe `source` by the logs
  // instead of loading its snapshot: the source's log holds the whole cut
  // in fewer bytes than the weights (its replay_bytes), its initial weights
  // are ours, and no other seed that answered (not joining) names other
  // initial weights (one that joined from a snapshot names none).
  static bool MayJoinByReplay(const std::string& own_initial, size_t source,
                              const std::vector<absl::StatusOr<server::FetchedSnapshot>>& probes);

 private:
  GossipPeers() = default;
  absl::Status Apply(model::Backend& backend, server::Received& received);
  // At quiescence: OK when the backend's replica has the checksum the
  // messages it applied give; kInternal naming both otherwise.
  absl::Status CheckReplicaAtQuiescence(model::Backend& backend);
  // Calls `wait` (a node wait with a deadline; true: go on) until it says go
  // on, applying what arrives between calls.
  bool Stopped() const { return options_.stop != nullptr && options_.stop->load(); }
  absl::Status WaitApplying(model::Backend& backend,
                            const std::function<bool(server::Clock::time_point)>& wait);
  // Re-joins when the node asks, then applies what arrives until the cluster
  // is quiescent (OK) or `until` (kDeadlineExceeded).
  absl::Status ApplyUntilQuiescent(model::Backend& backend, server::Clock::time_point until);
  // Measures the training replica's checksum against what the messages it
  // applied say; on a mismatch re-joins from a live peer's snapshot.
  absl::Status CheckReplica(model::Backend& backend, uint64_t steps_done);
  // Loads `source`'s snapshot, once one of `witnesses` (another node than
  // the source: on a first join the other seeds that answered the probe, on
  // a re-join the live members; server::ConfirmCut) confirmed its cut:
  // kDataLoss when a witness's messages say otherwise, kUnavailable when
  // none could tell within 10 s. With nobody to ask (a lone seed, a cluster
  // of two) it is installed unwitnessed, and said so.
  absl::Status Resync(const std::string& source, const std::vector<std::string>& witnesses);
  // Re-joins when the node asks (ResyncRequired, or a failed check). A
  // source that does not answer, or whose snapshot lacks our own messages
  // while another live member has them, is not fatal: the node picks
  // another and the next call tries again.
  absl::Status ResyncIfAsked();
  // What this worker asks a peer's Snapshot call: its fingerprint, identity
  // and token; with `header_only`, the header alone (a join probe).
  v1::SnapshotRequest SnapshotRequest(bool header_only) const;
  // One header-only snapshot request to every seed, all at once.
  std::vector<absl::StatusOr<server::FetchedSnapshot>> ProbeSeeds(
      const std::vector<std::string>& seeds) const;
  // The first join: probes, loads a witnessed snapshot or starts from the
  // seed's weights (see above).
  absl::Status JoinFromSeeds(const std::vector<std::string>& seeds);
  // kUnavailable, `why` and the timeout, once the join has taken
  // --join-timeout-s (never with 0).
  absl::Status UnlessJoinTimedOut(server::Clock::time_point join_start,
                                  const std::string& why) const;
  // After a contradiction, a source with no witness is not installed from:
  // waits a second (kUnavailable, naming the contradiction, once the join
  // has taken --join-timeout-s).
  absl::Status WaitForAWitness(server::Clock::time_point join_start, const std::string& source,
                               const std::set<std::string>& refused);
  // Where a first join loads its snapshot from, and who witnesses it.
  struct JoinSource {
    std::string address;  // empty: start from the seed's weights
    std::vector<std::string> witnesses;
    // What each seed that answered said ("ADDRESS (ID: N messages
    // applied)", or joining), for the log: a start from the seed's weights
    // names the answers it rests on.
    std::vector<std::string> answers;
    // A join by replay (MayJoinByReplay): the source's cut and its bytes;
    // empty and 0 when the snapshot is to be loaded.
    server::VersionMap replay_cut;
    uint64_t replay_bytes = 0;
  };
  // Probes the seeds but `refused` until conclusive (see above); the join's
  // timeout counts from `start`. A refused seed had trained, so with one the
  // worker never starts from the seed's weights.
  absl::Status FindJoinSource(const std::vector<std::string>& seeds,
                              const std::set<std::string>& refused, server::Clock::time_point start,
                              JoinSource* source);
  // One round of probes read: the most advanced seed and its witnesses,
  // the most messages any applied, and who did not answer. A peer of
  // another cluster is an error.
  static absl::Status ChooseSource(
      const std::vector<std::string>& seeds,
      const std::vector<absl::StatusOr<server::FetchedSnapshot>>& probes,
      const std::string& own_initial, JoinSource* source, uint64_t* best_total,
      std::vector<std::string>* silent);
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
