#include "server/grpc_transport.h"

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "codec/fixed_point.h"
#include "codec/weight_checksum.h"
#include "base/status_macros.h"
#include "proto/reckon.grpc.pb.h"
#include "server/member.h"
#include "server/snapshot_cuts.h"

namespace reckon::server {
namespace {

using Frame = v1::GossipFrame;

// The write side of one stream, shared by the Link the node holds and the
// reactor gRPC holds. Contract with the reactor: start_write is called only
// while `writing` (set under mu), and finalize (Finish / cancel + RemoveHold)
// exactly once, when closing with no write in flight; after finalize no
// Start* is ever called, which is what keeps the reactor alive until then.
// start_read restarts reading paused by flow control (ResumeReading),
// under both locks (life_mu_, then mu_: the only place they nest).
//
// Abort cancels the call (`cancel`) even with a write in flight; the write
// then completes with ok = false and finalize follows as above. `cancel` is
// only ever called while the reactor is alive: the reactor calls
// ReactorDone first thing in OnDone, under the same lock.
class StreamCore : public std::enable_shared_from_this<StreamCore> {
 public:
  std::function<void(const Frame*)> start_write;
  std::function<void()> start_read;
  std::function<void()> finalize;
  std::function<void()> cancel;

  // `urgent`: ahead of the frames waiting, behind earlier urgent ones.
  bool Enqueue(std::shared_ptr<const Frame> frame, size_t byte_cap, bool urgent = false) {
    const Frame* first = nullptr;
    {
      absl::MutexLock l(&mu_);
      if (closing_ || queued_bytes_ >= byte_cap) return false;
      if (writing_) {
        queued_bytes_ += frame->ByteSizeLong();
        if (urgent) {
          queue_.insert(queue_.begin() + static_cast<std::ptrdiff_t>(urgent_waiting_),
                        std::move(frame));
          ++urgent_waiting_;
        } else {
          queue_.push_back(std::move(frame));
        }
        return true;
      }
      writing_ = true;
      current_ = std::move(frame);
      first = current_.get();
    }
    start_write(first);
    return true;
  }

  // From OnWriteDone.
  void WriteDone(bool ok) {
    const Frame* next = nullptr;
    bool do_finalize = false;
    {
      absl::MutexLock l(&mu_);
      if (!ok) {
        closing_ = true;
        queue_.clear();
        queued_bytes_ = 0;
        urgent_waiting_ = 0;
      }
      if (!queue_.empty()) {
        current_ = std::move(queue_.front());
        queue_.pop_front();
        if (urgent_waiting_ > 0) --urgent_waiting_;
        queued_bytes_ -= current_->ByteSizeLong();
        next = current_.get();
      } else {
        writing_ = false;
        current_.reset();
        do_finalize = closing_ && !finalized_;
        if (do_finalize) finalized_ = true;
      }
    }
    if (next) start_write(next);
    if (do_finalize) {
      auto keep = shared_from_this();  // finalize may end the last other owner
      finalize();
    }
  }

  // Ends the stream after what is queued (`drop_queue`: at once).
  void Close(bool drop_queue) {
    bool do_finalize = false;
    {
      absl::MutexLock l(&mu_);
      closing_ = true;
      if (drop_queue) {
        queue_.clear();
        queued_bytes_ = 0;
        urgent_waiting_ = 0;
      }
      do_finalize = !writing_ && !finalized_;
      if (do_finalize) finalized_ = true;
    }
    if (do_finalize) {
      auto keep = shared_from_this();
      finalize();
    }
  }

  // Ends the stream now (Link::Abort).
  void Abort() {
    Close(/*drop_queue=*/true);
    absl::MutexLock l(&life_mu_);
    if (!reactor_done_) cancel();
  }

  // First thing in the reactor's OnDone: no cancel reaches it afterwards.
  void ReactorDone() {
    absl::MutexLock l(&life_mu_);
    reactor_done_ = true;
  }

  // Flow control (LinkEvents::OnFrame said to pause). From OnReadDone:
  // true when reading pauses now; false when a resume came first (the
  // caller reads on).
  bool PauseReading() {
    absl::MutexLock l(&life_mu_);
    if (resume_early_) {
      resume_early_ = false;
      return false;
    }
    paused_ = true;
    return true;
  }
  // Link::ResumeReading, from any thread: starts the next read if reading
  // paused, else cancels the pause about to come. Under life_mu_, so the
  // reactor cannot be done meanwhile (OnDone takes it first), and under mu_,
  // so finalize cannot have been decided: no read starts after Finish.
  void ResumeReading() {
    absl::MutexLock life(&life_mu_);
    if (reactor_done_) return;
    if (!paused_) {
      resume_early_ = true;
      return;
    }
    absl::MutexLock l(&mu_);
    if (finalized_) return;  // ending: no more reads
    paused_ = false;
    start_read();
  }

  size_t QueuedBytes() {
    absl::MutexLock l(&mu_);
    return queued_bytes_ + (current_ ? current_->ByteSizeLong() : 0);
  }

 private:
  absl::Mutex life_mu_;
  bool reactor_done_ ABSL_GUARDED_BY(life_mu_) = false;
  bool paused_ ABSL_GUARDED_BY(life_mu_) = false;        // no read outstanding
  bool resume_early_ ABSL_GUARDED_BY(life_mu_) = false;  // a resume before the pause
  absl::Mutex mu_;
  std::deque<std::shared_ptr<const Frame>> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t urgent_waiting_ ABSL_GUARDED_BY(mu_) = 0;  // at the front of queue_
  std::shared_ptr<const Frame> current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finalized_ ABSL_GUARDED_BY(mu_) = false;
};

class GrpcLink : public Link {
 public:
  GrpcLink(std::shared_ptr<StreamCore> core, bool dialed, std::string description)
      : core_(std::move(core)), dialed_(dialed), description_(std::move(description)) {}
  bool Send(std::shared_ptr<const Frame> frame, size_t byte_cap) override {
    return core_->Enqueue(std::move(frame), byte_cap);
  }
  bool SendUrgent(std::shared_ptr<const Frame> frame, size_t byte_cap) override {
    return core_->Enqueue(std::move(frame), byte_cap, /*urgent=*/true);
  }
  size_t QueuedBytes() const override { return core_->QueuedBytes(); }
  void Close() override { core_->Close(false); }
  void Abort() override { core_->Abort(); }
  void ResumeReading() override { core_->ResumeReading(); }
  bool dialed() const override { return dialed_; }
  std::string Describe() const override { return description_; }
  std::string PeerIdentity() const override {
    absl::MutexLock l(&identity_mu_);
    return identity_;
  }
  std::string PeerCertificate() const override {
    absl::MutexLock l(&identity_mu_);
    return certificate_;
  }
  // Set by the reactor before it hands the node the stream's first frame.
  void SetPeer(const grpc::AuthContext& context) {
    absl::MutexLock l(&identity_mu_);
    identity_ = ::reckon::server::PeerIdentity(context);
    certificate_ = ::reckon::server::PeerCertificate(context);
  }

 private:
  std::shared_ptr<StreamCore> core_;
  const bool dialed_;
  const std::string description_;
  mutable absl::Mutex identity_mu_;
  std::string identity_ ABSL_GUARDED_BY(identity_mu_);
  std::string certificate_ ABSL_GUARDED_BY(identity_mu_);
};

// Counts live reactors so Shutdown can wait for them.
class StreamCount {
 public:
  explicit StreamCount(std::shared_ptr<std::atomic<int>> n) : n_(std::move(n)) { ++*n_; }
  ~StreamCount() { --*n_; }

 private:
  std::shared_ptr<std::atomic<int>> n_;
};

// Both stream reactors' OnReadDone: hand the frame to the node and read on,
// or end the stream when the peer is gone.
template <typename Reactor>
void ReadDone(Reactor* reactor, bool ok, StreamCore& core, LinkEvents* node,
              const std::shared_ptr<GrpcLink>& link, Frame* in) {
  if (!ok) {
    core.Close(true);
    return;
  }
  const bool read_on = node->OnFrame(link, std::move(*in));
  in->Clear();
  // Paused: the peer's next frames wait in the stream's HTTP/2 window and
  // the sockets until the node has taken what it holds of this link's.
  if (read_on || !core.PauseReading()) reactor->StartRead(in);
}

class ServerStream : public grpc::ServerBidiReactor<Frame, Frame> {
 public:
  ServerStream(LinkEvents* node, grpc::CallbackServerContext* context, const std::string& peer,
               std::shared_ptr<std::atomic<int>> live)
      : node_(node), count_(std::move(live)), core_(std::make_shared<StreamCore>()) {
    core_->start_write = [this](const Frame* f) { StartWrite(f); };
    core_->start_read = [this] { StartRead(&in_); };
    core_->finalize = [this] { Finish(grpc::Status::OK); };
    core_->cancel = [context] { context->TryCancel(); };
    link_ = std::make_shared<GrpcLink>(core_, false, absl::StrCat("accepted from ", peer));
    link_->SetPeer(*context->auth_context());
    node_->OnLinkUp(link_);
    StartRead(&in_);
  }
  void OnReadDone(bool ok) override { ReadDone(this, ok, *core_, node_, link_, &in_); }
  void OnWriteDone(bool ok) override { core_->WriteDone(ok); }
  void OnCancel() override { core_->Close(true); }
  void OnDone() override {
    core_->ReactorDone();
    node_->OnLinkClosed(link_, "stream ended");
    delete this;
  }

 private:
  LinkEvents* node_;
  StreamCount count_;
  std::shared_ptr<StreamCore> core_;
  std::shared_ptr<GrpcLink> link_;
  Frame in_;
};

class RefusingStream : public grpc::ServerBidiReactor<Frame, Frame> {
 public:
  explicit RefusingStream(const std::string& why) {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
  }
  void OnDone() override { delete this; }
};

class ClientStream : public grpc::ClientBidiReactor<Frame, Frame> {
 public:
  ClientStream(LinkEvents* node, const std::string& address, std::shared_ptr<grpc::Channel> channel,
               std::shared_ptr<std::atomic<int>> live)
      : node_(node),
        count_(std::move(live)),
        stub_(v1::Gossip::NewStub(std::move(channel))),
        core_(std::make_shared<StreamCore>()) {
    core_->start_write = [this](const Frame* f) { StartWrite(f); };
    core_->start_read = [this] { StartRead(&in_); };
    core_->finalize = [this] {
      context_.TryCancel();
      RemoveHold();
    };
    core_->cancel = [this] { context_.TryCancel(); };
    link_ = std::make_shared<GrpcLink>(core_, true, absl::StrCat("dialed ", address));
  }
  std::shared_ptr<GrpcLink> Begin() {
    std::shared_ptr<GrpcLink> link = link_;  // `this` may be gone once the call starts
    stub_->async()->Exchange(&context_, this);
    AddHold();  // writes come from the node, outside reactions
    StartRead(&in_);
    StartCall();
    return link;
  }
  void OnReadDone(bool ok) override {
    if (ok && !identity_known_) {
      // The handshake is done once a frame came: the server's certificate
      // is known now, before the node sees its Hello.
      identity_known_ = true;
      link_->SetPeer(*context_.auth_context());
    }
    ReadDone(this, ok, *core_, node_, link_, &in_);
  }
  void OnWriteDone(bool ok) override { core_->WriteDone(ok); }
  void OnDone(const grpc::Status& status) override {
    core_->ReactorDone();
    node_->OnLinkClosed(link_, status.ok()
                                   ? "stream ended"
                                   : absl::StrCat("stream ended: ", status.error_message()));
    delete this;
  }

 private:
  LinkEvents* node_;
  StreamCount count_;
  grpc::ClientContext context_;
  std::unique_ptr<v1::Gossip::Stub> stub_;
  std::shared_ptr<StreamCore> core_;
  std::shared_ptr<GrpcLink> link_;
  Frame in_;
  bool identity_known_ = false;  // reactions of one stream never overlap
};

// Snapshot calls in flight and when each must be done by
// (TransportOptions::snapshot_deadline). Any thread: gRPC's on creation,
// the reactor's OnDone on removal, the service thread's sweep.
class SnapshotDeadlines {
 public:
  void Add(const void* call, grpc::CallbackServerContext* context, Clock::time_point deadline) {
    absl::MutexLock l(&mu_);
    calls_[call] = {context, deadline};
  }
  // REQUIRES: before the call's reactor is deleted (its context with it).
  void Remove(const void* call) {
    absl::MutexLock l(&mu_);
    calls_.erase(call);
  }
  // Cancels the calls past their deadline (each once); how many.
  int CancelExpired(Clock::time_point now) {
    absl::MutexLock l(&mu_);
    int cancelled = 0;
    for (auto& [call, entry] : calls_) {
      if (entry.deadline > now) continue;
      entry.context->TryCancel();  // the context lives until Remove: under mu_
      entry.deadline = Clock::time_point::max();
      ++cancelled;
    }
    return cancelled;
  }

 private:
  struct Entry {
    grpc::CallbackServerContext* context;
    Clock::time_point deadline;
  };
  absl::Mutex mu_;
  std::map<const void*, Entry> calls_ ABSL_GUARDED_BY(mu_);
};

// Weight bytes per snapshot chunk: 1 MiB, or less under a smaller frame cap
// (--max-message-mb 1): a chunk's framing (its field's tag and length, the
// message's) must fit beside them, or the transport's own limit refuses
// the chunk. Whole weights (a multiple of 8).
size_t SnapshotChunkBytes(int max_message_bytes) {
  constexpr size_t kFraming = 64;
  const size_t room = static_cast<size_t>(std::max(max_message_bytes, 1024)) - kFraming;
  return std::min(size_t{1} << 20, room) / sizeof(int64_t) * sizeof(int64_t);
}

// Streams a snapshot: header, then the weights in chunks of about 1 MiB; striped,
// the weights of one stripe (server/snapshot_cuts.h). Created on a gRPC
// thread; Start runs on the service thread (the copy and SHA-256 of the
// replica are MiBs of work that must not hold up gRPC's threads).
class SnapshotWriter : public grpc::ServerWriteReactor<v1::SnapshotChunk> {
 public:
  // `cutting`: the service's count of calls cutting the replica now, held
  // up while this one lives (null for a header or a stripe of a kept cut).
  // `deadlines`: where the call is registered until OnDone (it must end
  // by `deadline`). `chunk_bytes`: weight bytes per chunk (SnapshotChunkBytes).
  SnapshotWriter(const v1::SnapshotRequest& request, SnapshotCuts* cuts,
                 std::shared_ptr<std::atomic<int>> live, std::shared_ptr<std::atomic<int>> cutting,
                 SnapshotDeadlines* deadlines, grpc::CallbackServerContext* context,
                 Clock::time_point deadline, size_t chunk_bytes)
      : chunk_bytes_(chunk_bytes),
        deadlines_(deadlines),
        count_(std::move(live)),
        cutting_(cutting ? std::optional<StreamCount>(std::in_place, std::move(cutting))
                         : std::nullopt),
        cuts_(cuts),
        header_only_(request.header_only()),
        stripes_(std::clamp<uint32_t>(request.stripes(), 1, kMaxSnapshotStripes)),
        cut_id_(request.cut_id()),
        stripe_(request.stripe()),
        checksum_at_(request.has_checksum_at()
                         ? std::optional<VersionMap>(FromProto(request.checksum_at()))
                         : std::nullopt) {
    deadlines_->Add(this, context, deadline);
  }
  // Ends the call before it started (the service is too busy).
  void Refuse(const grpc::Status& status) { Finish(status); }
  void Start(NodeService* node) {
    if (cut_id_ != 0 && !header_only_) {
      StartStripe();
      return;
    }
    v1::SnapshotChunk::Header* h = chunk_.mutable_header();
    *h->mutable_fingerprint() = node->fingerprint();
    h->set_source_node_id(node->node_id());
    h->set_param_count(node->fingerprint().param_count());
    if (!node->started()) {
      // Joining: it holds nothing yet. Only a probe gets this far.
      h->set_joining(true);
    } else if (header_only_ && checksum_at_) {
      // A witness's answer: what our messages say the checksum is there.
      if (std::optional<uint64_t> at = node->ChecksumAt(*checksum_at_)) {
        h->set_witnessed(true);
        h->set_witnessed_checksum(*at);
      }
      ToProto(node->Applied(), h->mutable_applied());
    } else {
      NodeService::Snapshot snap = node->TakeSnapshot(!header_only_);
      ToProto(snap.applied, h->mutable_applied());
      h->set_checksum(snap.checksum);
      if (!header_only_) {
        // A replica that is not what its messages say is never handed on.
        if (!node->CheckSnapshotServed(snap, node->weight_checksum().Of(snap.weights))) {
          Finish(grpc::Status(grpc::StatusCode::DATA_LOSS,
                              "this node's replica failed its checksum; ask another peer"));
          return;
        }
        SnapshotCut cut;
        h->set_param_count(snap.weights.size());
        h->set_weights_sha256(codec::WeightHashOf(snap.weights));
        cut.weights = std::move(snap.weights);
        cut.header = *h;
        if (stripes_ > 1) {
          cut.header.set_stripes(stripes_);
          cut_ = cuts_->Keep(std::move(cut), Clock::now());
        } else {
          cut_ = std::make_shared<const SnapshotCut>(std::move(cut));
        }
        *h = cut_->header;
        node->Count(v1::NodeCounters::kSnapshotsServedFieldNumber);
      }
    }
    BeginWeights(0);
    StartWrite(&chunk_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok || header_only_ || cut_ == nullptr || offset_ >= end_) {
      Finish(ok ? grpc::Status::OK : grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      return;
    }
    const size_t n = std::min(chunk_bytes_, end_ - offset_);
    chunk_.set_weights(reinterpret_cast<const char*>(cut_->weights.data()) + offset_, n);
    offset_ += n;
    StartWrite(&chunk_);
  }
  void OnDone() override {
    deadlines_->Remove(this);
    delete this;
  }

 private:
  // A stripe of a kept cut: its header, then its range of the weights.
  void StartStripe() {
    absl::StatusOr<std::shared_ptr<const SnapshotCut>> cut =
        cuts_->Take(cut_id_, stripe_, Clock::now());
    if (!cut.ok()) {
      Finish(grpc::Status(cut.status().code() == absl::StatusCode::kNotFound
                              ? grpc::StatusCode::NOT_FOUND
                              : grpc::StatusCode::INVALID_ARGUMENT,
                          std::string(cut.status().message())));
      return;
    }
    cut_ = *std::move(cut);
    *chunk_.mutable_header() = cut_->header;
    chunk_.mutable_header()->set_stripe(stripe_);
    BeginWeights(stripe_);
    StartWrite(&chunk_);
  }
  // The bytes stripe `stripe` of the cut carries (all of them unstriped).
  void BeginWeights(uint32_t stripe) {
    if (cut_ == nullptr) return;
    const ParamRange range = StripeRange(cut_->weights.size(),
                                         std::max<uint32_t>(cut_->header.stripes(), 1), stripe);
    offset_ = range.begin * sizeof(int64_t);
    end_ = range.end * sizeof(int64_t);
  }

  const size_t chunk_bytes_;
  SnapshotDeadlines* const deadlines_;
  StreamCount count_;
  std::optional<StreamCount> cutting_;
  SnapshotCuts* const cuts_;
  std::shared_ptr<const SnapshotCut> cut_;  // null: header only, or refused
  v1::SnapshotChunk chunk_;
  size_t offset_ = 0;
  size_t end_ = 0;
  const bool header_only_;
  const uint32_t stripes_;
  const uint64_t cut_id_;
  const uint32_t stripe_;
  const std::optional<VersionMap> checksum_at_;  // a witness is asked
};

class RefusingWriter : public grpc::ServerWriteReactor<v1::SnapshotChunk> {
 public:
  explicit RefusingWriter(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

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
}

namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", s.error_message());
  switch (s.error_code()) {
    case grpc::StatusCode::FAILED_PRECONDITION:
      return absl::FailedPreconditionError(message);
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::PermissionDeniedError(message);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(message);
    case grpc::StatusCode::DATA_LOSS:
      return absl::DataLossError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace

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
              std::chrono::milliseconds snapshot_deadline, size_t snapshot_chunk_bytes)
      : live_(std::move(live)),
        tls_(tls),
        snapshot_deadline_(snapshot_deadline),
        snapshot_chunk_bytes_(snapshot_chunk_bytes) {
    worker_.SetSweep([this] {
      const int expired = deadlines_.CancelExpired(Clock::now());
      NodeService* node = node_.load();
      if (expired > 0 && node != nullptr) {
        node->Count(v1::NodeCounters::kSnapshotsExpiredFieldNumber, expired);
      }
    });
  }
  void SetNode(NodeService* node, LinkEvents* events) {
    events_.store(events != nullptr ? events : node);
    node_.store(node);
  }
  void Shutdown() { worker_.Shutdown(); }

  grpc::ServerBidiReactor<Frame, Frame>* Exchange(grpc::CallbackServerContext* ctx) override {
    NodeService* node = node_.load();
    if (node == nullptr || !node->started()) return new RefusingStream("joining");
    return new ServerStream(events_.load(), ctx, ctx->peer(), live_);
  }

  grpc::ServerWriteReactor<v1::SnapshotChunk>* Snapshot(
      grpc::CallbackServerContext* ctx, const v1::SnapshotRequest* request) override {
    NodeService* node = node_.load();
    // A joining node answers probes (it has nothing: evidence for the
    // prober that this seed has not trained) but serves no weights.
    if (node == nullptr || (!node->started() && !request->header_only())) {
      return new RefusingWriter(grpc::Status(grpc::StatusCode::UNAVAILABLE, "joining"));
    }
    absl::Status s = node->CheckPeer(request->fingerprint(), request->cluster_token(),
                                     request->requester().node_id());
    if (s.ok() && tls_) {
      const std::string identity = PeerIdentity(*ctx->auth_context());
      if (identity != request->requester().node_id()) {
        s = absl::PermissionDeniedError(
            absl::StrCat("requester '", request->requester().node_id().substr(0, 64),
                         "' is not the identity of its certificate ('", identity, "')"));
      }
    }
    if (!s.ok()) {
      node->Log(absl::StrCat("refusing a snapshot to '",
                             request->requester().node_id().substr(0, 64), "' (", ctx->peer(),
                             "): ", s.message()));
      return new RefusingWriter(grpc::Status(s.code() == absl::StatusCode::kPermissionDenied
                                                 ? grpc::StatusCode::PERMISSION_DENIED
                                                 : grpc::StatusCode::FAILED_PRECONDITION,
                                             std::string(s.message())));
    }
    // A cut copies the whole replica and holds it while it is sent: at
    // most kMaxCutsInFlight at once (stripes of a kept cut copy nothing).
    const bool cuts = request->cut_id() == 0 && !request->header_only();
    if (cuts && cuts_in_flight_->load() >= kMaxCutsInFlight) {
      node->Count(v1::NodeCounters::kRequestsRefusedFieldNumber);
      return new RefusingWriter(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("busy: ", kMaxCutsInFlight, " snapshots being served; ask another peer")));
    }
    auto* writer = new SnapshotWriter(*request, &cuts_, live_, cuts ? cuts_in_flight_ : nullptr,
                                      &deadlines_, ctx, Clock::now() + snapshot_deadline_,
                                      snapshot_chunk_bytes_);
    if (!worker_.Post([writer, node] { writer->Start(node); })) {
      node->Count(v1::NodeCounters::kRequestsRefusedFieldNumber);
      writer->Refuse(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                  "busy: too many status and snapshot calls queued"));
      return writer;
    }
    // Admitted: a worker on its way in, whom a finished node waits for.
    node->NoteJoiner(request->requester().node_id(), request->requester().incarnation());
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
};

absl::StatusOr<std::unique_ptr<GossipServer>> GossipServer::Start(const std::string& listen,
                                                                  const TransportOptions& options,
                                                                  int* bound_port) {
  std::unique_ptr<GossipServer> server(new GossipServer());
  server->options_ = options;
  server->service_ = std::make_unique<GrpcService>(
      server->live_streams_, options.tls.enabled(), options.snapshot_deadline,
      SnapshotChunkBytes(options.max_message_bytes));
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
    auto* stream = new ClientStream(node, address, std::move(channel), live);
    return stream->Begin();
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

namespace {

// A stub on a fresh channel, for the one-off blocking calls below.
std::unique_ptr<v1::Gossip::Stub> OneOffStub(const std::string& address, const TlsConfig& tls) {
  return v1::Gossip::NewStub(grpc::CreateCustomChannel(address, MakeChannelCredentials(tls),
                                                       GossipChannelArguments(TransportOptions{})));
}

}  // namespace

absl::StatusOr<v1::NodeStatus> FetchStatus(const std::string& address,
                                           std::chrono::milliseconds timeout,
                                           const TlsConfig& tls,
                                           const std::string& cluster_token) {
  auto stub = OneOffStub(address, tls);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::NodeStatus status;
  v1::StatusRequest request;
  request.set_cluster_token(cluster_token);
  grpc::Status s = stub->Status(&context, request, &status);
  if (!s.ok()) return FromGrpc(s, absl::StrCat("status of ", address));
  return status;
}

namespace {

using Header = v1::SnapshotChunk::Header;

// Reads one snapshot stream from `address`: the header (checked against the
// model's size), then exactly the weights of the range `on_header` returns
// for it (all of them when the stream turns out unstriped), written in
// place into `weights` (all `param_count` of them; null for a header
// alone). `on_header` runs once the header is in, before the weights are
// read (a striped fetch starts the other stripes there); an error from it
// ends the stream. Stripes write disjoint ranges, so they may run at once.
absl::StatusOr<Header> ReadSnapshotStream(
    const std::string& address, const std::shared_ptr<grpc::Channel>& channel,
    const v1::SnapshotRequest& request, uint64_t param_count,
    std::chrono::system_clock::time_point deadline,
    const std::function<absl::StatusOr<ParamRange>(const Header&)>& on_header,
    int64_t* weights) {
  auto stub = v1::Gossip::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(deadline);
  std::unique_ptr<grpc::ClientReader<v1::SnapshotChunk>> reader = stub->Snapshot(&context, request);
  Header header;
  v1::SnapshotChunk chunk;
  bool have_header = false;
  char* into = nullptr;  // where this stream's weights go
  uint64_t room = 0, written = 0;  // weight bytes this stream carries, and has
  while (reader->Read(&chunk)) {
    absl::Status wrong;
    if (chunk.has_header()) {
      if (have_header) {
        wrong = absl::DataLossError(absl::StrCat(address, ": two snapshot headers"));
      } else if (chunk.header().param_count() != param_count) {
        wrong = absl::DataLossError(absl::StrCat("snapshot from ", address, " has ",
                                                 chunk.header().param_count(),
                                                 " parameters, expected ", param_count));
      } else {
        have_header = true;
        header = chunk.header();
        absl::StatusOr<ParamRange> range = on_header(header);
        if (range.ok()) {
          room = (range->end - range->begin) * sizeof(int64_t);
          if (weights != nullptr) into = reinterpret_cast<char*>(weights + range->begin);
        } else {
          wrong = range.status();
        }
      }
    } else if (!have_header) {
      wrong = absl::DataLossError(absl::StrCat(address, ": snapshot weights before the header"));
    } else if (weights == nullptr || written + chunk.weights().size() > room) {
      wrong = absl::DataLossError(absl::StrCat("snapshot from ", address, " is too long"));
    } else {
      std::memcpy(into + written, chunk.weights().data(), chunk.weights().size());
      written += chunk.weights().size();
    }
    if (!wrong.ok()) {
      context.TryCancel();
      return wrong;
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return FromGrpc(s, absl::StrCat("snapshot from ", address));
  if (!have_header) return absl::DataLossError(absl::StrCat(address, ": empty snapshot"));
  if (weights != nullptr && written != room) {
    return absl::DataLossError(absl::StrCat("snapshot from ", address, " has ", written,
                                            " weight bytes, expected ", room));
  }
  return header;
}

// Stripe `stripe` of the cut `first` began (its stripe 0), on its own
// connection; its header must be the cut's.
absl::StatusOr<Header> ReadOtherStripe(const std::string& address,
                                       std::shared_ptr<grpc::Channel> channel,
                                       v1::SnapshotRequest request, const Header& first,
                                       uint32_t stripe,
                                       std::chrono::system_clock::time_point deadline,
                                       int64_t* weights) {
  request.set_cut_id(first.cut_id());
  request.set_stripe(stripe);
  const std::string what = absl::StrCat("stripe ", stripe, " of ", first.stripes());
  absl::StatusOr<Header> got = ReadSnapshotStream(
      address, channel, request, first.param_count(), deadline,
      [&](const Header& h) -> absl::StatusOr<ParamRange> {
        Header as_first = h;
        as_first.set_stripe(0);
        if (h.stripe() != stripe ||
            !google::protobuf::util::MessageDifferencer::Equals(as_first, first)) {
          return absl::DataLossError(absl::StrCat(
              "snapshot from ", address, ": the header of ", what, " is not its cut's"));
        }
        return StripeRange(first.param_count(), first.stripes(), stripe);
      },
      weights);
  if (!got.ok()) {
    return absl::Status(got.status().code(), absl::StrCat(what, ": ", got.status().message()));
  }
  return got;
}

}  // namespace

absl::StatusOr<FetchedSnapshot> FetchSnapshot(const std::string& address,
                                              const v1::SnapshotRequest& request,
                                              uint64_t param_count,
                                              std::chrono::milliseconds timeout,
                                              const TlsConfig& tls) {
  if (request.cut_id() != 0) {
    return absl::InvalidArgumentError("FetchSnapshot cuts a new snapshot: no cut_id");
  }
  const auto deadline = std::chrono::system_clock::now() + timeout;
  const uint32_t asked =
      request.header_only() ? 1 : std::clamp<uint32_t>(request.stripes(), 1, kMaxSnapshotStripes);
  // One channel per stripe, each its own TCP connection (a local subchannel
  // pool), all connecting now: the other stripes start as soon as stripe
  // 0's header names the cut, without another handshake's round trips.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  grpc::ChannelArguments args = GossipChannelArguments(TransportOptions{});
  if (asked > 1) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  for (uint32_t i = 0; i < asked; ++i) {
    channels.push_back(grpc::CreateCustomChannel(address, MakeChannelCredentials(tls), args));
    if (asked > 1) channels.back()->GetState(/*try_to_connect=*/true);
  }
  FetchedSnapshot out;
  if (!request.header_only()) out.weights.resize(param_count);
  int64_t* const weights = request.header_only() ? nullptr : out.weights.data();
  std::vector<std::future<absl::StatusOr<Header>>> others;
  // Stripe 0 (or the whole snapshot) comes on this thread; once its header
  // names the cut, the other stripes start on their own connections.
  absl::StatusOr<Header> first = ReadSnapshotStream(
      address, channels[0], request, param_count, deadline,
      [&](const Header& h) -> absl::StatusOr<ParamRange> {
        const uint32_t stripes = std::max<uint32_t>(h.stripes(), 1);
        if (stripes > asked || stripes > kMaxSnapshotStripes || h.stripe() != 0 ||
            (stripes > 1) != (h.cut_id() != 0)) {
          return absl::DataLossError(absl::StrCat("snapshot from ", address, " comes in ",
                                                  h.stripes(), " stripes (cut ", h.cut_id(),
                                                  ", stripe ", h.stripe(), "); asked for ",
                                                  asked));
        }
        for (uint32_t i = 1; i < stripes; ++i) {
          others.push_back(std::async(std::launch::async, ReadOtherStripe, address, channels[i],
                                      request, h, i, deadline, weights));
        }
        return StripeRange(param_count, stripes, 0);
      },
      weights);
  // Every stripe ends before `out` may go (they write into it).
  absl::Status failed = first.status();
  for (auto& f : others) {
    absl::StatusOr<Header> stripe = f.get();
    if (failed.ok()) failed = stripe.status();
  }
  RECKON_RETURN_IF_ERROR(failed);
  out.header = *first;
  out.header.clear_stripe();
  out.applied = FromProto(out.header.applied());
  if (request.header_only()) return out;
  if (codec::WeightHashOf(out.weights) != out.header.weights_sha256()) {
    return absl::DataLossError(
        absl::StrCat("snapshot from ", address, " does not match its SHA-256"));
  }
  return out;
}

absl::Status ConfirmCut(const VersionMap& applied, uint64_t checksum, const std::string& source,
                        const std::vector<std::string>& witnesses, v1::SnapshotRequest probe,
                        uint64_t param_count, std::chrono::milliseconds timeout,
                        const TlsConfig& tls) {
  probe.set_header_only(true);
  ToProto(applied, probe.mutable_checksum_at());
  const auto deadline = Clock::now() + timeout;
  std::map<std::string, std::string> why_not;  // per witness, its last answer
  for (;;) {
    for (const std::string& witness : witnesses) {
      absl::StatusOr<FetchedSnapshot> answer =
          FetchSnapshot(witness, probe, param_count, std::chrono::seconds(2), tls);
      if (!answer.ok()) {
        why_not[witness] = std::string(answer.status().message().substr(0, 200));
        continue;
      }
      const v1::SnapshotChunk::Header& h = answer->header;
      if (!h.witnessed()) {
        why_not[witness] = h.joining() ? "joining" : "has not applied that far";
        continue;
      }
      if (h.witnessed_checksum() != checksum) {
        return absl::DataLossError(absl::StrCat(
            "the snapshot from ", source, " claims checksum ", codec::ChecksumHex(checksum),
            " at its cut, but the messages of ", witness, " (", h.source_node_id().substr(0, 64),
            ") give ", codec::ChecksumHex(h.witnessed_checksum()), " there"));
      }
      return absl::OkStatus();
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<std::string> lines;
  for (const auto& [witness, why] : why_not) lines.push_back(absl::StrCat(witness, ": ", why));
  return absl::UnavailableError(absl::StrCat("no member confirmed the cut of the snapshot from ",
                                             source, " within ", timeout.count(), " ms (",
                                             absl::StrJoin(lines, "; "), ")"));
}

}  // namespace reckon::server
