// What a gossip node is made with (GossipNode::Create): who it is, whom it
// dials, the cluster it belongs to, its timings and limits, its receive
// path and which replica holds the weights. server/cluster_config.h makes
// the fingerprint, the incarnation and the timings for every kind of
// member; each limit's counter is in docs/gossip.md "Threat model".
//
// Threads: plain data; copied into the node, which never changes it.
#ifndef RECKON_SERVER_NODE_OPTIONS_H_
#define RECKON_SERVER_NODE_OPTIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "proto/reckon.pb.h"
#include "server/update_signatures.h"
#include "server/version_vector.h"

namespace reckon::server {

using Clock = std::chrono::steady_clock;

struct NodeOptions {
  std::string node_id;
  uint64_t incarnation = 0;
  std::string listen_address;      // as peers should dial it
  std::vector<std::string> seeds;  // host:port of peers (resolved)
  v1::ClusterFingerprint fingerprint;
  std::string cluster_token;
  // With mutual TLS: a peer's Hello must claim the node id its certificate
  // names (Link::PeerIdentity), or it is refused for good.
  bool require_peer_identity = false;
  // With mutual TLS (server/update_signature.h MakeUpdateSignatures): our
  // Updates are signed, every Update is verified with its origin's
  // certificate (learned from handshakes and Certificates frames) before it
  // is kept. Off when null. One node's: two nodes never share one.
  std::shared_ptr<UpdateSignatures> signatures;
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds failure_timeout{3000};
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{2000};
  // A peer that has not caught up on what we pushed within this long is
  // served again from its version vector (lost frames, dropped links).
  std::chrono::milliseconds repair_timeout{500};
  // Memory held by the message log, as allocated (MessageLog::MemoryOf:
  // the frames, their entries and order records; server/held_bytes.h).
  size_t log_byte_cap = size_t{256} << 20;
  // Training pauses (WaitWhileBacklogged) while our own messages that a live
  // peer has not applied take more than this many bytes. 0: a share of the
  // log, log_byte_cap / (2 x members), so the log always still holds what
  // a slow peer needs from us: were it evicted, that peer would re-join from
  // a snapshot that lacks it, and so would we after it (found with dense
  // messages on 100 Mbit/s links: every worker ended in that failure).
  size_t max_backlog_bytes = 0;
  // A message stays in the log at least this long even once every live
  // member applied it: a worker joining from a snapshot cut a moment ago
  // still finds what came after its cut (else it would re-join at once).
  std::chrono::milliseconds log_min_retention{30000};
  size_t send_queue_byte_cap = size_t{16} << 20;  // per link
  // Lanes (server/lanes.h): up to this many extra streams (0-16) to each
  // member we send Updates of at least `lane_min_bytes` to, each its own
  // TCP connection; such Updates go on whichever of the stream and its
  // lanes has the least queued. Dialed only once such an Update goes to
  // the member, so threshold-coded clusters (KBs per message) open none.
  uint32_t lanes = 3;
  size_t lane_min_bytes = size_t{1} << 20;
  size_t early_arrival_cap = 4096;  // messages per origin
  // Memory held by early arrivals, all origins, as allocated: the frames,
  // their decoded form and the buffer's nodes (early_arrivals.h MemoryOf,
  // server/held_bytes.h; a decoded dense message is 8 bytes a parameter,
  // 117 MB at Strom's size, so this is the log's cap).
  size_t early_arrival_byte_cap = size_t{256} << 20;
  // Members this node keeps track of, itself excluded: a peer announcing
  // invented members (or a misconfigured seed list) cannot grow the table,
  // the heartbeats and the dials without bound.
  size_t max_members = 1024;
  // Origins (node id and incarnation) in the version vector at most: each
  // is state on every node and an entry in every heartbeat. A member of a
  // token cluster can invent origins (an empty Update is valid); past the
  // cap a new origin's Update is dropped (counted: origins_refused) unless
  // it is a member's current incarnation (members have their own cap).
  // Origins held only as early arrivals (seq 1 never came) count as well.
  // A cluster of max_members, each restarted three times, fits.
  size_t max_origins = 4096;
  // Nothing before the handshake (server/pending_handshakes.h): a stream we
  // accepted must say Hello within this long, and at most this many
  // streams wait for their Hello at once (the oldest accepted one is
  // closed for a new one). Counted: hello_timeouts, handshakes_evicted.
  std::chrono::milliseconds hello_timeout{10000};
  size_t max_pending_handshakes = 64;
  // Frames waiting for the node thread, in memory as allocated
  // (Inbox::MemoryOf): a link whose frames in
  // the inbox exceed its share (this cap over the links with frames
  // waiting) is paused until the node thread has handled them (flow
  // control: its peer's next frames wait in the HTTP/2 window and the
  // sockets, and its writes block). The inbox holds at most this much plus
  // one frame per link. Counted: inbox_pauses.
  size_t inbox_byte_cap = size_t{256} << 20;
  // A heartbeat carries the member list (O(members) bytes) only every this
  // many on a stream, the first included: sent on every one, to every
  // member, it made the mesh's heartbeat bytes grow with members squared
  // (62% of all bytes at 32 members; docs/scaling.md). Members are learned,
  // and `heard` refreshed, within this many heartbeats.
  int member_list_every = 10;
  // Observability hook: called on the node thread, under the node's lock,
  // for every peer message accepted into the replica. Must be quick and must
  // not call the node. (The transport benchmark times emit-to-apply with it;
  // the synthetic worker records each message's arrival.)
  std::function<void(const OriginKey& origin, const v1::Update& update)> on_accept;
  // The node's clock, for protocol time: ticks and heartbeats, every
  // timeout (failure, hello, dial, repair), log retention, joiners, lanes,
  // arrival times. Empty: the steady clock. A test passes one it moves
  // ahead (tests/inproc_cluster.h SteppedClock) to drive time instead of
  // sleeping; it must never go back. Deadlines callers pass
  // (WaitQuiescent, Stop's flush) and what is measured for people
  // (LoopAge, backpressure, apply latency) stay on the steady clock.
  std::function<Clock::time_point()> clock;
  // The receive path (docs/architecture.md "The receive path"): each batch
  // of received Updates is validated (decode, CRC, checksum contribution)
  // off the node's lock on `receive_threads` threads (the node thread one of
  // them), and the node's mirror keeps the quanta only and applies with
  // prefetching; only ordering, the signature and bookkeeping stay under
  // the lock.
  int receive_threads = 0;  // 0: one per core
  // Which replica holds the weights (docs/architecture.md "The receive
  // path"). kMirror: the node keeps its own fixed-point mirror, applies
  // every message to it and cuts snapshots and hashes from it under its
  // lock (a node without a training thread: tests, benchmarks, synthetic
  // members). kTrainingThread: a worker's node keeps only the version
  // vector and the checksum ledger; the training thread's replica is the
  // only one (each peer message applied once, by the training thread: on a
  // GPU worker, none on the CPU). Snapshots are then cut from it at a step
  // boundary (Received::weights_wanted, OfferTrainingCut: TakeSnapshot says
  // `pending` until one is there), and the hash quiescence compares is the
  // training replica's, taken in WaitQuiescent.
  enum class Replica { kMirror, kTrainingThread };
  Replica replica = Replica::kMirror;
};

// [A-Za-z0-9._-]{1,63}: safe in logs, JSON and metric labels.
bool ValidNodeId(const std::string& id);

}  // namespace reckon::server

#endif  // RECKON_SERVER_NODE_OPTIONS_H_
