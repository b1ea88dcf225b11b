#include "server/grpc_transport.h"

#include <grpcpp/grpcpp.h>

#include <deque>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "proto/reckon.grpc.pb.h"
#include "server/grpc_streams.h"
#include "server/member.h"
#include "server/snapshot_cuts.h"
#include "server/snapshot_writer.h"

namespace reckon::server {

grpc::ChannelArguments GossipChannelArguments(const TransportOptions& o) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(o.max_message_bytes);
  args.SetMaxSendMessageSize(o.max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(o.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(o.keepalive_timeout.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Retry soon after a failed attempt (a peer restarting), but give each
  // attempt its time: gRPC's C core takes "min reconnect backoff" as the
  // minimum connect timeout (doc/connection-backoff.md, MIN_CONNECT_TIMEOUT).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(o.connect_timeout.count()));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Each dial is its own connection: streams to one peer never share a
  // broken one.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, o.stream_window_bytes);
  return args;
}

void ConfigureGossipServer(const TransportOptions& options, grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(options.max_message_bytes);
  builder->SetMaxSendMessageSize(options.max_message_bytes);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                              static_cast<int>(options.keepalive_time.count()));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                              static_cast<int>(options.keepalive_timeout.count()));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, options.stream_window_bytes);
  // What an outsider's connections can hold (docs/gossip.md "Threat
  // model"): gRPC 1.51 has no cap on their number, so each is short-lived
  // unless it carries a call.
  builder->AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                              static_cast<int>(options.connection_handshake_timeout.count()));
  builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                              static_cast<int>(options.connection_idle_timeout.count()));
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, options.max_streams_per_connection);
}

// One thread, "reckon-service", for the service's heavy answers (status and
// snapshots hash or copy the whole replica). gRPC's callback threads are few
// (two on a 2-core machine) and also drive the sockets: blocked for long,
// every stream of the process stalls. Tasks run in order; Shutdown runs what
// is queued, then joins.
class ServiceThread {
 public:
  ServiceThread() {
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "reckon-service");
      Loop();
    });
  }
  ~ServiceThread() { Shutdown(); }
  // Queues `task`; false (not queued) when kMaxQueued tasks wait already:
  // status and snapshot calls are cheap to send and costly to answer, so
  // a flood of them is refused (RESOURCE_EXHAUSTED), not queued.
  bool Post(std::function<void()> task) {
    absl::MutexLock l(&mu_);
    if (tasks_.size() >= kMaxQueued) return false;
    tasks_.push_back(std::move(task));
    return true;
  }
  static constexpr size_t kMaxQueued = 16;
  // Runs `sweep` on this thread about every 100 ms, between tasks.
  // REQUIRES: before the first Post.
  void SetSweep(std::function<void()> sweep) {
    absl::MutexLock l(&mu_);
    sweep_ = std::move(sweep);
  }
  void Shutdown() {
    {
      absl::MutexLock l(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    auto next_sweep = Clock::now();
    for (;;) {
      std::function<void()> task, sweep;
      {
        absl::MutexLock l(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(
                                 +[](ServiceThread* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
                                   return t->stopping_ || !t->tasks_.empty();
                                 },
                                 this),
                             absl::Milliseconds(100));
        if (stopping_ && tasks_.empty()) return;  // stopping, nothing left
        if (!tasks_.empty()) {
          task = std::move(tasks_.front());
          tasks_.pop_front();
        }
        sweep = sweep_;
      }
      if (task) task();
      if (sweep && Clock::now() >= next_sweep) {
        sweep();
        next_sweep = Clock::now() + std::chrono::milliseconds(100);
      }
    }
  }
  std::function<void()> sweep_ ABSL_GUARDED_BY(mu_);
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class GrpcService final : public v1::Gossip::CallbackService {
 public:
  GrpcService(std::shared_ptr<std::atomic<int>> live, bool tls,
              std::chrono::milliseconds snapshot_deadline, size_t snapshot_chunk_bytes,
              std::chrono::milliseconds training_cut_wait)
      : live_(std::move(live)),
        tls_(tls),
        snapshot_deadline_(snapshot_deadline),
        snapshot_chunk_bytes_(snapshot_chunk_bytes),
        training_cut_wait_(training_cut_wait) {
    worker_.SetSweep([this] {
      const int expired = deadlines_.CancelExpired(Clock::now());
      NodeService* node = node_.load();
      if (expired > 0 && node != nullptr) {
        node->Count(v1::NodeCounters::kSnapshotsExpiredFieldNumber, expired);
      }
      if (node != nullptr) RetryWaiting(node);
    });
  }
  void SetNode(NodeService* node, LinkEvents* events) {
    events_.store(events != nullptr ? events : node);
    node_.store(node);
  }
  void Shutdown() { worker_.Shutdown(); }

  ExchangeReactor* Exchange(grpc::CallbackServerContext* ctx) override {
    NodeService* node = node_.load();
    if (node == nullptr || !node->started()) return RefuseExchange("joining");
    return AcceptExchange(events_.load(), ctx, live_);
  }

  grpc::ServerWriteReactor<v1::SnapshotChunk>* Snapshot(
      grpc::CallbackServerContext* ctx, const v1::SnapshotRequest* request) override {
    NodeService* node = node_.load();
    // A joining node answers probes (it has nothing: evidence for the
    // prober that this seed has not trained) but serves no weights.
    if (node == nullptr || (!node->started() && !request->header_only())) {
      return RefuseSnapshot(grpc::Status(grpc::StatusCode::UNAVAILABLE, "joining"));
    }
    // An export (reckonctl) asks as Status does: the token, or any
    // certificate of the CA; a member's request is checked as its Hello.
    absl::Status s = request->for_export()
                         ? node->CheckToken(request->cluster_token())
                         : node->CheckPeer(request->fingerprint(), request->cluster_token(),
                                           request->requester().node_id());
    if (s.ok()) s = CheckOrigins(request->checksum_at(), node->max_vector_origins());
    if (s.ok() && tls_ && !request->for_export()) {
      const std::string identity = PeerIdentity(*ctx->auth_context());
      if (identity != request->requester().node_id()) {
        s = absl::PermissionDeniedError(
            absl::StrCat("requester '", request->requester().node_id().substr(0, 64),
                         "' is not the identity of its certificate ('", identity, "')"));
      }
    }
    if (!s.ok()) {
      node->Count(v1::NodeCounters::kRequestsRefusedFieldNumber);
      node->Log(absl::StrCat("refusing a snapshot to '",
                             request->requester().node_id().substr(0, 64), "' (", ctx->peer(),
                             "): ", s.message()));
      return RefuseSnapshot(grpc::Status(s.code() == absl::StatusCode::kPermissionDenied
                                             ? grpc::StatusCode::PERMISSION_DENIED
                                             : grpc::StatusCode::FAILED_PRECONDITION,
                                         std::string(s.message())));
    }
    // A cut copies the whole replica and holds it while it is sent: at
    // most kMaxCutsInFlight at once (stripes of a kept cut copy nothing).
    const bool cuts = request->cut_id() == 0 && !request->header_only();
    if (cuts && cuts_in_flight_->load() >= kMaxCutsInFlight) {
      node->Count(v1::NodeCounters::kRequestsRefusedFieldNumber);
      return RefuseSnapshot(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("busy: ", kMaxCutsInFlight, " snapshots being served; ask another peer")));
    }
    auto* writer = new SnapshotWriter(*request, &cuts_, live_, cuts ? cuts_in_flight_ : nullptr,
                                      &deadlines_, ctx, Clock::now() + snapshot_deadline_,
                                      snapshot_chunk_bytes_, training_cut_wait_);
    if (!worker_.Post([this, writer, node] {
          if (writer->Start(node) == SnapshotWriter::Progress::kWaiting) waiting_.push_back(writer);
        })) {
      node->Count(v1::NodeCounters::kRequestsRefusedFieldNumber);
      writer->Refuse(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                  "busy: too many status and snapshot calls queued"));
      return writer;
    }
    // Admitted: a worker on its way in, whom a finished node waits for
    // (an export is nobody's way in).
    if (!request->for_export()) {
      node->NoteJoiner(request->requester().node_id(), request->requester().incarnation());
    }
    return writer;
  }

  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const v1::StatusRequest* request,
                                   v1::NodeStatus* response) override {
    NodeService* node = node_.load();
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (node == nullptr) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "starting"));
      return reactor;
    }
    // The status names members, their addresses and the weight hash: the
    // cluster's token is asked as a Hello asks it (with TLS the handshake
    // already checked the certificate against the CA).
    if (absl::Status token = node->CheckToken(request->cluster_token()); !token.ok()) {
      node->Count(v1::NodeCounters::kRequestsRefusedFieldNumber);
      reactor->Finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                   absl::StrCat("status: ", token.message())));
      return reactor;
    }
    if (!worker_.Post([node, response, reactor] {
          node->FillStatus(response, /*with_weight_hash=*/true);
          reactor->Finish(grpc::Status::OK);
        })) {
      node->Count(v1::NodeCounters::kRequestsRefusedFieldNumber);
      reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "busy: too many status and snapshot calls queued"));
    }
    return reactor;
  }

 private:
  // Service thread: the writers waiting for a worker's training thread to
  // cut its replica are started again (each ends within its cut wait).
  void RetryWaiting(NodeService* node) {
    std::vector<SnapshotWriter*> waiting;
    waiting.swap(waiting_);
    for (SnapshotWriter* writer : waiting) {
      if (writer->Start(node) == SnapshotWriter::Progress::kWaiting) waiting_.push_back(writer);
    }
  }

  // Snapshot writers whose cut is not there yet (SnapshotWriter::Start):
  // alive until started again, since a call not finished is not deleted.
  // Only the service thread touches it.
  std::vector<SnapshotWriter*> waiting_;
  // Snapshot cuts kept for their other stripes: a few, for a minute (the
  // joiner's whole fetch has that long: worker/gossip_peers.cc).
  SnapshotCuts cuts_{4, std::chrono::seconds(60)};
  SnapshotDeadlines deadlines_;  // before worker_: its sweep uses them
  static constexpr int kMaxCutsInFlight = 4;
  // Snapshot calls cutting the replica now (each holds a copy of it).
  std::shared_ptr<std::atomic<int>> cuts_in_flight_ = std::make_shared<std::atomic<int>>(0);
  ServiceThread worker_;  // after cuts_: its tasks use them
  std::atomic<NodeService*> node_{nullptr};
  std::atomic<LinkEvents*> events_{nullptr};
  std::shared_ptr<std::atomic<int>> live_;
  const bool tls_;
  const std::chrono::milliseconds snapshot_deadline_;
  const size_t snapshot_chunk_bytes_;
  const std::chrono::milliseconds training_cut_wait_;
};

absl::StatusOr<std::unique_ptr<GossipServer>> GossipServer::Start(const std::string& listen,
                                                                  const TransportOptions& options,
                                                                  int* bound_port) {
  std::unique_ptr<GossipServer> server(new GossipServer());
  server->options_ = options;
  server->service_ = std::make_unique<GrpcService>(
      server->live_streams_, options.tls.enabled(), options.snapshot_deadline,
      SnapshotChunkBytes(options.max_message_bytes), options.training_cut_wait);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, MakeServerCredentials(options.tls), bound_port);
  builder.RegisterService(server->service_.get());
  ConfigureGossipServer(options, &builder);
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || *bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (in use, or not an address of this host?)"));
  }
  return server;
}

GossipServer::~GossipServer() { Shutdown(std::chrono::milliseconds(2000)); }

void GossipServer::SetNode(NodeService* node, LinkEvents* events) {
  service_->SetNode(node, events);
}

Dialer GossipServer::MakeDialer(LinkEvents* node) {
  TransportOptions options = options_;
  std::shared_ptr<std::atomic<int>> live = live_streams_;
  return [node, options, live](const std::string& address) -> std::shared_ptr<Link> {
    auto channel = grpc::CreateCustomChannel(address, MakeChannelCredentials(options.tls),
                                             GossipChannelArguments(options));
    return DialExchange(node, address, std::move(channel), live);
  };
}

void GossipServer::Shutdown(std::chrono::milliseconds deadline) {
  if (!server_) return;
  const auto until = std::chrono::system_clock::now() + deadline;
  server_->Shutdown(until);
  // Dialed streams are ended by the node (Stop closes every link); wait for
  // their reactors too.
  while (live_streams_->load() > 0 && std::chrono::system_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  server_->Wait();
  service_->Shutdown();  // after Wait: calls still open needed its answers
  server_.reset();
}

}  // namespace reckon::server
