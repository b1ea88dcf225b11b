#include "server/grpc_streams.h"

#include <deque>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/grpc_credentials.h"
#include "server/held_bytes.h"

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
      // The memory it holds, as allocated (server/held_bytes.h): a
      // heartbeat's vector of 4,096 origins takes six times its wire size.
      const size_t bytes = HeldBytesOf(*frame);
      if (writing_) {
        queued_bytes_ += bytes;
        if (urgent) {
          queue_.insert(queue_.begin() + static_cast<std::ptrdiff_t>(urgent_waiting_),
                        Queued{std::move(frame), bytes});
          ++urgent_waiting_;
        } else {
          queue_.push_back(Queued{std::move(frame), bytes});
        }
        return true;
      }
      writing_ = true;
      current_ = std::move(frame);
      current_bytes_ = bytes;
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
        current_ = std::move(queue_.front().frame);
        current_bytes_ = queue_.front().bytes;
        queue_.pop_front();
        if (urgent_waiting_ > 0) --urgent_waiting_;
        queued_bytes_ -= current_bytes_;
        next = current_.get();
      } else {
        writing_ = false;
        current_.reset();
        current_bytes_ = 0;
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
    return queued_bytes_ + (current_ ? current_bytes_ : 0);
  }

 private:
  absl::Mutex life_mu_;
  bool reactor_done_ ABSL_GUARDED_BY(life_mu_) = false;
  bool paused_ ABSL_GUARDED_BY(life_mu_) = false;        // no read outstanding
  bool resume_early_ ABSL_GUARDED_BY(life_mu_) = false;  // a resume before the pause
  absl::Mutex mu_;
  struct Queued {
    std::shared_ptr<const Frame> frame;
    size_t bytes = 0;  // HeldBytesOf, taken once
  };
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t urgent_waiting_ ABSL_GUARDED_BY(mu_) = 0;  // at the front of queue_
  std::shared_ptr<const Frame> current_ ABSL_GUARDED_BY(mu_);
  size_t current_bytes_ ABSL_GUARDED_BY(mu_) = 0;
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
  ServerStream(LinkEvents* node, grpc::CallbackServerContext* context,
               std::shared_ptr<std::atomic<int>> live)
      : node_(node), count_(std::move(live)), core_(std::make_shared<StreamCore>()) {
    core_->start_write = [this](const Frame* f) { StartWrite(f); };
    core_->start_read = [this] { StartRead(&in_); };
    core_->finalize = [this] { Finish(grpc::Status::OK); };
    core_->cancel = [context] { context->TryCancel(); };
    link_ =
        std::make_shared<GrpcLink>(core_, false, absl::StrCat("accepted from ", context->peer()));
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

}  // namespace

ExchangeReactor* AcceptExchange(LinkEvents* events, grpc::CallbackServerContext* context,
                                std::shared_ptr<std::atomic<int>> live) {
  return new ServerStream(events, context, std::move(live));
}

ExchangeReactor* RefuseExchange(const std::string& why) { return new RefusingStream(why); }

std::shared_ptr<Link> DialExchange(LinkEvents* events, const std::string& address,
                                   std::shared_ptr<grpc::Channel> channel,
                                   std::shared_ptr<std::atomic<int>> live) {
  auto* stream = new ClientStream(events, address, std::move(channel), std::move(live));
  return stream->Begin();
}

}  // namespace reckon::server
