// The gossip node over real gRPC: the Gossip service (Exchange streams,
// Snapshot, Status), `GossipServer`, and dialed Exchange streams as Links
// (grpc_streams.h). The blocking client calls of a joining worker and
// `reckonctl` are grpc_clients.h's, the TLS credentials grpc_credentials.h's.
//
// Threads: streams use gRPC's callback API (its two callback threads, no
// thread per stream); every reaction only enqueues into the node
// (LinkEvents::On*). Heavy answers (snapshots, witnesses) run on the
// service's one "reckon-service" thread. It serves a NodeService
// (node_service.h), not the concrete node. Writes are queued per stream,
// one in flight at a time, each frame kept alive until its OnWriteDone.
// Errors: Start's (a port that cannot be bound) are kUnavailable naming the
// address; what a peer sends wrong ends its call with a gRPC status naming
// it, never the server.
#ifndef RECKON_SERVER_GRPC_TRANSPORT_H_
#define RECKON_SERVER_GRPC_TRANSPORT_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/reckon.pb.h"
#include "server/grpc_credentials.h"
#include "server/link.h"
#include "server/node_service.h"
#include "server/version_vector.h"

namespace grpc {
class ChannelArguments;
class Server;
class ServerBuilder;
}  // namespace grpc

namespace reckon::server {

struct TransportOptions {
  // Largest frame accepted or sent; larger ones end the stream (gRPC
  // RESOURCE_EXHAUSTED) and are never parsed.
  int max_message_bytes = 64 << 20;
  std::chrono::milliseconds keepalive_time{10000};
  std::chrono::milliseconds keepalive_timeout{5000};
  // How long one connection attempt (TCP, then HTTP/2 SETTINGS) may take.
  // It must cover a few round trips of the slowest link, lost SYNs
  // included (TCP resends the first after 1 s): at 100 ms no worker ever
  // connected over an 80 ms one-way link (gossip_netns_test).
  std::chrono::milliseconds connect_timeout{5000};
  // Each stream's initial HTTP/2 flow-control window, both ways (gRPC's
  // lookahead). gRPC starts at 64 KiB and grows it by BDP probing, too slowly
  // for a long fat link: dense messages between two workers over 1 Gbit/s
  // with 50 ms RTT went at 185 Mbit/s so, and at 447 from any start of 1 to
  // 64 MiB (past it the kernel's TCP buffers bound one connection;
  // docs/scaling.md "Long fat links"). What arrives is read at once into
  // the node's inbox, so the window adds no buffering of its own.
  int stream_window_bytes = 8 << 20;
  // A joiner fetches a snapshot in up to this many stripes, each on its own
  // TCP connection (server/snapshot_cuts.h; fewer for a small model): one
  // connection's buffers bound it on a long fat link.
  int snapshot_stripes = 4;
  // A Snapshot call this node serves must end within this long, or it is
  // cancelled: a requester that stops reading would hold its cut (a copy
  // of the replica) and one of the few cuts in flight for as long as its
  // connection lives. Above the joiner's own 60 s (worker/gossip_peers.cc).
  // Counted: snapshots_expired.
  std::chrono::milliseconds snapshot_deadline{90000};
  // A worker's node keeps no mirror (NodeOptions::Replica::kTrainingThread):
  // a snapshot it serves is cut from the training replica at its next step
  // boundary. A call whose cut is not there within this long (the worker is
  // evaluating, re-joining or leaving) ends UNAVAILABLE, so the joiner asks
  // another peer within its own 60 s. Counted: snapshots_expired.
  std::chrono::milliseconds training_cut_wait{20000};
  // A connection accepted that has not finished its TLS handshake and sent
  // HTTP/2's SETTINGS within this long is closed (gRPC's default: 2 min).
  std::chrono::milliseconds connection_handshake_timeout{10000};
  // A connection accepted that carries no call for this long is closed
  // (GOAWAY): a member's stream, a lane or a snapshot is a call, so only
  // an idle client's or an outsider's connection goes; a client reconnects.
  std::chrono::milliseconds connection_idle_timeout{60000};
  // Calls open at once on one accepted connection (HTTP/2
  // MAX_CONCURRENT_STREAMS; more are refused by the transport before any
  // of ours sees them). Each dial is its own connection: a member's stream
  // or lane is one call; a reckonctl's status or snapshot a few.
  int max_streams_per_connection = 16;
  // Mutual TLS (server/tls.h); off when empty.
  TlsConfig tls;
};

// The gossip transport's gRPC settings, one place for the dialing side and
// the serving side (and for `reckonctl bench transport`, which measures a
// stream with them): message size limits, keepalive, reconnect backoff.
grpc::ChannelArguments GossipChannelArguments(const TransportOptions& options);
void ConfigureGossipServer(const TransportOptions& options, grpc::ServerBuilder* builder);

class GrpcService;

class GossipServer {
 public:
  // Binds `listen` ("host:port"; port 0 picks a free one) and serves. Until
  // SetNode, Exchange and Snapshot answer UNAVAILABLE ("joining") and Status
  // says joined: false. `*bound_port` gets the port.
  static absl::StatusOr<std::unique_ptr<GossipServer>> Start(const std::string& listen,
                                                             const TransportOptions& options,
                                                             int* bound_port);
  ~GossipServer();

  // REQUIRES: `node` (and `events`) outlive this server's Shutdown.
  // Accepted streams' events go to `events` (default: the node itself; a
  // FaultInjector in the failure tests).
  void SetNode(NodeService* node, LinkEvents* events = nullptr);
  // Dials Exchange streams whose events go to `events`.
  Dialer MakeDialer(LinkEvents* events);
  // Stops serving, cancels every stream and waits (up to `deadline`) until
  // every stream reactor is gone, so none can call into the node afterwards.
  void Shutdown(std::chrono::milliseconds deadline);

 private:
  GossipServer() = default;
  TransportOptions options_;
  std::shared_ptr<std::atomic<int>> live_streams_ = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<GrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_GRPC_TRANSPORT_H_
