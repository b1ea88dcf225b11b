// The gossip node (docs/design.md "The gossip node"): membership, version vectors,
// exactly-once in-order delivery per origin, the message log, anti-entropy,
// failure detection and quiescence. Transport-agnostic: it talks to peers
// through Link (link.h); grpc_transport.h provides the real links. The node
// thread's methods are in node*.cc, one file per concern, over parts that own their
// state (inbox.h, node_membership.h, message_log.h, ...): docs/
// architecture.md "The gossip node in parts".
//
// Threads: the node runs one thread of its own, "reckon-gossip", which
// processes every received frame, link event and timer tick in order. Link
// reactions only enqueue into its inbox (OnFrame / OnLinkUp / OnLinkClosed).
// The node is split by who calls it: the training thread calls its side,
// training() (training_port.h: Publish, TakeReceived, the waits), and
// InstallSnapshot; the gRPC service, the HTTP endpoint and the transport's
// link reactions call service() (service_port.h, the NodeService). The
// state the three share, and the one lock over it, is the core
// (node_core.h). All public methods are thread-safe and none blocks for
// long.
//
// With NodeOptions::Replica::kMirror the node keeps its own fixed-point
// mirror of the replica: the initial weights plus every message it has
// accepted. Snapshots are cut from it under the node's lock, so they are
// consistent with the version vector whatever the training thread is doing.
// The training thread applies the same messages to its backend
// (TakeReceived); at quiescence both hashes match. A worker's node keeps
// none (kTrainingThread): its training thread cuts snapshots of its own
// replica at a step boundary and hashes it for quiescence.
#ifndef RECKON_SERVER_NODE_H_
#define RECKON_SERVER_NODE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/thread_pool.h"
#include "codec/fixed_point.h"
#include "codec/update_message.h"
#include "proto/reckon.pb.h"
#include "server/applied_state.h"
#include "server/heartbeat_writer.h"
#include "server/inbox.h"
#include "server/link.h"
#include "server/member.h"
#include "server/membership.h"
#include "server/node_core.h"
#include "server/node_options.h"
#include "server/outbound.h"
#include "server/service_port.h"
#include "server/training_port.h"
#include "server/update_validation.h"
#include "server/version_vector.h"

namespace reckon::server {

class GossipNode final {
 public:
  // The counters (proto/reckon.proto NodeCounters): service().counters().
  using Counters = NodeCore::Counters;
  // `initial_weights`: the replica before any message (from the seed).
  static absl::StatusOr<std::unique_ptr<GossipNode>> Create(NodeOptions options,
                                                            std::span<const int64_t> initial,
                                                            int fraction_bits);
  ~GossipNode();

  // Starts the node thread; from then on it dials peers. Call once, after
  // any snapshot was installed (InstallSnapshot) and the transport is ready.
  void Start(Dialer dialer);
  // Sends Leave to every peer (when `leave`) and waits up to `flush` for each
  // to drop its stream (it does on our Leave: then it surely has our last
  // frames), flushes what is queued, closes every link and stops the
  // thread. Idempotent.
  void Stop(bool leave, std::chrono::milliseconds flush);

  const NodeOptions& options() const { return core_.options; }

  // The training thread's side (training_port.h): publish, take what
  // arrived, report, wait for backpressure and quiescence.
  TrainingPort& training() { return training_; }
  // The service's side (service_port.h): what the gRPC service, /status,
  // /metrics and the transport's link reactions ask of the node.
  ServicePort& service() { return service_; }
  // Not OK once a peer refused us for good (another cluster, a taken node
  // id): the worker stops with this error.
  absl::Status Health();

  // --- join ---
  // Replaces the mirror and version vector with a snapshot, keeping our
  // own messages newer than the snapshot's entry for us (replayed on top).
  // The training thread gets the weights via TakeReceived().replace_weights.
  // kFailedPrecondition when one of our own messages it needs is gone.
  // kDataLoss when the weights' checksum is not `checksum` (the source's
  // replica is not what its messages say). On any error nothing changes.
  absl::Status InstallSnapshot(std::span<const int64_t> weights, const VersionMap& applied,
                               uint64_t checksum, const std::string& source);

 private:
  // `clock_injected`: options.clock was given (not the steady clock).
  GossipNode(NodeOptions options, AppliedState state, bool clock_injected);
  void Run();
  // The receive path's work that needs no node state (update_validation.h)
  // and the signature's check (with TLS), for every Update in a batch the
  // node thread took: off the lock, on the validation threads.
  void ValidateUpdates(Slice& slice) ABSL_LOCKS_EXCLUDED(core_.mu);
  // The decoded form a slice of a batch may hold at once (Run): about 2 MiB
  // for each validation thread, 8 MiB at least, 64 MiB at most (a larger
  // message is a slice alone). A slice's decoded messages are all held until
  // its runs are accepted and taken. At 64 MiB whatever the threads, a
  // receive thread's decode faulted in 13.7 fresh pages a Strom message (the
  // allocator's per-thread heaps are 64 MiB; 1.8 at 4 MiB), and one receive
  // thread took 0.078-0.085 ms of CPU a message against 0.058-0.059 at 8
  // MiB and 0.059-0.064 at 4 MiB (`reckonctl bench inbound --paths
  // gpu-host`, 2 cores; docs/benchmarks.md, "The node's slices").
  size_t DecodedSliceBytes() const;
  // A slice whose decoded form is smaller is validated on the node thread
  // alone (about three Strom-size messages make 512 KiB).
  static constexpr size_t kParallelValidationBytes = size_t{512} << 10;
  // The most decoded update bytes (as TakeSlice counts them) handled under
  // one hold of the node's lock: 256 Ki updates of a threshold codec.
  static constexpr size_t kLockedRunBytes = size_t{1} << 20;
  // Handles what Run took of the inbox, in runs of events under the node's
  // lock (kLockedRunBytes), ticking when due, and adds what each run
  // accepted to the mirror after it (AddToMirror). False once the node is
  // stopping.
  bool HandleBatch(std::deque<Inbox::Event>& batch, Clock::time_point& next_tick)
      ABSL_LOCKS_EXCLUDED(core_.mu);
  void HandleEvent(Inbox::Event& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // A link is gone: a member's stream (its lanes go with it), a lane, or
  // one not handshaken yet.
  void HandleLinkClosed(const std::shared_ptr<Link>& link, const std::string& why,
                        Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  void HandleHello(const std::shared_ptr<Link>& link, const v1::Hello& hello)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // Section 3's rules (membership.h JudgeHello) for a Hello on `link`.
  HelloVerdict Judge(const Link& link, const v1::Hello& hello) const
      ABSL_SHARED_LOCKS_REQUIRED(core_.mu);
  // Answers a Refusal (accepted streams), or, on a dialed one refused for
  // good, takes it as the peer refusing us (RefusedByDialed); closes the
  // stream.
  void Refuse(const std::shared_ptr<Link>& link, const std::string& peer, const std::string& reason,
              bool permanent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // The peer we dialed on `link` refused us for good (`why`: its permanent
  // Refusal, or its Hello of another cluster): Membership::RefusedByDialed,
  // which stops this node (fatal) only when it cannot be a member at all.
  void RefusedByDialed(const std::shared_ptr<Link>& link, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // Validates (docs/wire.md: everything, before anything is kept), then accepts
  // in order or buffers an early arrival; corrupt ones are dropped and counted.
  // `frame` (an Update) is the received frame itself: kept, not copied.
  // `validated`: its ValidateUpdate, when the receive path ran it off the
  // lock (ReceivePath::kParallel); else it runs here.
  void HandleUpdate(Member& from, std::shared_ptr<v1::GossipFrame> frame,
                    std::optional<ValidatedUpdate> validated = std::nullopt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // A peer says it no longer holds messages of an origin that we lack
  // (docs/protocol.md section 5). Believed, and a re-join asked, only where
  // one can bring them: not about a live member's current incarnation from
  // anyone but that member (it serves its own messages), and only from a
  // member whose vector has the origin that far (others before the sender;
  // an origin has all of its own). Otherwise counted (rejoins_ignored).
  void HandleRejoinRequired(const Member& from, const v1::RejoinRequired& rejoin)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  void HandleHeartbeat(Member& m, const v1::Heartbeat& hb, Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // A new origin (nothing of it applied or held) would be refused now: the
  // vector and the early arrivals hold --max-origins origins, and it is not
  // a member's current incarnation. HandleUpdate drops its Updates; a
  // member's vector naming it makes it Member::refused_here.
  bool RefusesNewOrigin(const OriginKey& origin) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // What `hb` says of origins past a cap (Member::refused_here,
  // refused_there), counted (origins_diverged) and logged as found.
  void LearnRefusedOrigins(Member& m, const v1::Heartbeat& hb)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // Adds certificates to the book; new ones are passed on to every other
  // member, so a member's signed Updates can be verified wherever relayed.
  void LearnCertificates(const Member* from, const std::vector<std::string>& pems)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // Advances the version vector and the ledger, queues the update for the
  // mirror (added by AddToMirror, after the lock) and for the training
  // thread, logs it, forwards it down the tree.
  void Accept(const OriginKey& origin, std::shared_ptr<const v1::GossipFrame> frame,
              std::shared_ptr<const codec::DecodedUpdate> decoded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // Accepts the early arrivals of `origin` that are now next in line.
  void AcceptWaiting(const OriginKey& origin) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // Adds what was accepted to the mirror (none: nothing to do), counting
  // what the adds found (NodeCore::CountMirrorReport). Without the node's
  // lock: the training thread and the service do not wait for it.
  void AddToMirror() ABSL_LOCKS_EXCLUDED(core_.mu);
  // How AddToMirror adds `decoded`: in stripes on validators_ when it has
  // at least kStripedApplyUpdates updates (a cache miss each: stripes
  // overlap more of them), else null (one thread).
  codec::FixedPointReplica::ParallelFor StripedApply(const codec::DecodedUpdate& decoded) const;
  static constexpr size_t kStripedApplyUpdates = 16384;
  void Tick(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // Pushes what `m`'s version vector shows it lacks and our log holds.
  void AntiEntropy(Member& m, Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  void CollectGarbage(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // A Hello with lane > 0: on a link we accepted, a member asks to open a
  // lane (registered, answered, or refused: server/lanes.h LaneRefusal); on
  // one we dialed, the member's answer.
  void HandleLaneHello(const std::shared_ptr<Link>& link, const v1::Hello& hello)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // A frame on a link that is not a member's stream: a lane's Update is
  // handled as the stream's would be; anything else ends the lane.
  void HandleLaneFrame(const std::shared_ptr<Link>& link, v1::GossipFrame& frame,
                       std::optional<ValidatedUpdate> validated, Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // A heartbeat's frames (heartbeat_writer.h) with what this node reports:
  // its steps, training done, where it settled and with which hash, a
  // passed check to announce. `tick`: a tick's (Tick only).
  HeartbeatWriter::Bases MakeHeartbeats(bool tick) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // m's heartbeat (HeartbeatWriter::For), queued as SendTo(byte_cap); on
  // success the stream remembers this tick.
  bool SendHeartbeat(Member& m, const HeartbeatWriter::Bases& bases, size_t byte_cap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // Compares m's pending replica check with our ledger once we have passed
  // its vector (docs/gossip.md "Divergence detection").
  void ComparePeerCheck(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);
  // Our last seq that a snapshot at `applied` plus our log can give.
  uint64_t OwnMessagesBeyond(const VersionMap& applied) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu);

  // The options, the lock and the parts under it, which the training port
  // (training_port.h) shares (node_core.h).
  NodeCore core_;
  TrainingPort training_;
  ServicePort service_;
  std::thread thread_;
  // The threads validating received Updates and applying large ones to the
  // mirror in stripes (the node thread one of them). Only the node thread
  // calls it.
  std::unique_ptr<base::ThreadPool> validators_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_NODE_H_
