#include "server/inproc_link.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace reckon::server {

// Two ends; end 0 dialed, end 1 accepted. The ends are weak: each node owns
// its own end (through its member table), and a frame for an end its node
// no longer holds has nowhere to go.
struct InProcNetwork::Pipe {
  GossipNode* node[2] = {nullptr, nullptr};  // who is at each end (partitions)
  LinkEvents* events[2] = {nullptr, nullptr};
  std::weak_ptr<Link> end[2];
  std::string address;
  absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;
  // A dial across a partition: the listener never learns of it.
  bool listener_knows ABSL_GUARDED_BY(mu) = true;
};

class InProcLink final : public Link {
 public:
  InProcLink(InProcNetwork* net, std::shared_ptr<InProcNetwork::Pipe> pipe, int side)
      : net_(net), pipe_(std::move(pipe)), side_(side) {}

  bool Send(std::shared_ptr<const v1::GossipFrame> frame, size_t /*byte_cap*/) override {
    {
      absl::MutexLock l(&pipe_->mu);
      if (pipe_->closed) return false;
    }
    return net_->Transfer(pipe_, 1 - side_, std::move(frame));
  }
  size_t QueuedBytes() const override { return 0; }
  void Close() override {
    // After what was sent: the close travels behind the frames.
    net_->Transfer(pipe_, 1 - side_, nullptr);
  }
  void Abort() override { CloseNow(pipe_); }
  bool dialed() const override { return side_ == 0; }
  std::string Describe() const override {
    return side_ == 0 ? absl::StrCat("dialed inproc:", pipe_->address)
                      : absl::StrCat("accepted inproc:", pipe_->address);
  }

  // Marks the pipe closed and tells both nodes, once.
  static void CloseNow(const std::shared_ptr<InProcNetwork::Pipe>& pipe) {
    bool listener_knows;
    {
      absl::MutexLock l(&pipe->mu);
      if (pipe->closed) return;
      pipe->closed = true;
      listener_knows = pipe->listener_knows;
    }
    for (int side = 0; side < 2; ++side) {
      if (side == 1 && !listener_knows) continue;
      if (std::shared_ptr<Link> end = pipe->end[side].lock()) {
        pipe->events[side]->OnLinkClosed(end, "stream ended");
      }
    }
  }

 private:
  InProcNetwork* net_;
  std::shared_ptr<InProcNetwork::Pipe> pipe_;
  const int side_;
};

InProcNetwork::InProcNetwork(std::chrono::milliseconds latency,
                             std::function<Clock::time_point()> clock)
    : latency_(latency),
      in_flight_(std::make_unique<TimedQueue<Pending>>(
          "reckon-inproc", [this](Pending& p) { Deliver(std::move(p)); }, std::move(clock))) {}

InProcNetwork::~InProcNetwork() { in_flight_.reset(); }

void InProcNetwork::Listen(const std::string& address, GossipNode* node, LinkEvents* events) {
  absl::MutexLock l(&mu_);
  listeners_[address] = Listener{node, events != nullptr ? events : &node->service()};
}

Dialer InProcNetwork::MakeDialer(GossipNode* node, LinkEvents* events) {
  if (events == nullptr) events = &node->service();
  return [this, node, events](const std::string& address) { return Dial(node, events, address); };
}

void InProcNetwork::Partition(const std::vector<std::set<GossipNode*>>& groups) {
  absl::MutexLock l(&mu_);
  group_of_.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (GossipNode* n : groups[g]) group_of_[n] = static_cast<int>(g);
  }
  partitioned_ = true;
}

void InProcNetwork::Cut(GossipNode* a, GossipNode* b) {
  absl::MutexLock l(&mu_);
  cuts_.insert({a, b});
  cuts_.insert({b, a});
}

void InProcNetwork::Heal() {
  absl::MutexLock l(&mu_);
  group_of_.clear();
  cuts_.clear();
  partitioned_ = false;
}

void InProcNetwork::DelayUpdates(GossipNode* from, GossipNode* to,
                                 std::chrono::milliseconds delay) {
  absl::MutexLock l(&mu_);
  update_delay_[{from, to}] = delay;
}

InProcNetwork::Counters InProcNetwork::counters() {
  absl::MutexLock l(&mu_);
  return counters_;
}

bool InProcNetwork::Connected(GossipNode* a, GossipNode* b) {
  if (cuts_.count({a, b})) return false;
  if (!partitioned_) return true;
  auto ga = group_of_.find(a), gb = group_of_.find(b);
  return ga != group_of_.end() && gb != group_of_.end() && ga->second == gb->second;
}

std::shared_ptr<Link> InProcNetwork::Dial(GossipNode* from, LinkEvents* events,
                                          const std::string& address) {
  auto pipe = std::make_shared<Pipe>();
  pipe->address = address;
  pipe->node[0] = from;
  pipe->events[0] = events;
  auto dialed = std::make_shared<InProcLink>(this, pipe, 0);
  pipe->end[0] = dialed;
  GossipNode* listener = nullptr;
  LinkEvents* listener_events = nullptr;
  bool reachable = false;
  {
    absl::MutexLock l(&mu_);
    auto it = listeners_.find(address);
    if (it != listeners_.end()) {
      listener = it->second.node;
      listener_events = it->second.events;
      reachable = Connected(from, listener);
    }
  }
  if (listener == nullptr || !listener->service().started()) {
    // Nobody there: refused at once.
    events->OnLinkClosed(dialed, "connection refused");
    absl::MutexLock l(&pipe->mu);
    pipe->closed = true;
    return dialed;
  }
  pipe->node[1] = listener;
  pipe->events[1] = listener_events;
  if (!reachable) {
    // Across a partition: the dial hangs, unanswered, until aborted.
    absl::MutexLock l(&pipe->mu);
    pipe->listener_knows = false;
    return dialed;
  }
  auto accepted = std::make_shared<InProcLink>(this, pipe, 1);
  pipe->end[1] = accepted;
  // The listener's node holds its end from this event on.
  listener_events->OnLinkUp(accepted);
  return dialed;
}

bool InProcNetwork::Transfer(const std::shared_ptr<Pipe>& pipe, int to,
                             std::shared_ptr<const v1::GossipFrame> frame) {
  std::chrono::milliseconds delay = latency_;
  if (frame != nullptr && frame->has_update()) {
    absl::MutexLock l(&mu_);
    auto it = update_delay_.find({pipe->node[1 - to], pipe->node[to]});
    if (it != update_delay_.end()) delay += it->second;
  }
  if (delay.count() == 0) {
    Deliver(Pending{pipe, to, std::move(frame)});
    return true;
  }
  // A fixed delay per kind of frame: due times grow with the order of sends,
  // and equal ones keep their order, so per-pipe order holds among updates
  // and among the rest.
  in_flight_->Push(in_flight_->now() + delay, Pending{pipe, to, std::move(frame)});
  return true;
}

void InProcNetwork::Deliver(Pending p) {
  if (p.frame == nullptr) {
    InProcLink::CloseNow(p.pipe);
    return;
  }
  std::shared_ptr<Link> end;
  {
    absl::MutexLock l(&p.pipe->mu);
    if (p.pipe->closed || !p.pipe->listener_knows) return;
    end = p.pipe->end[p.to].lock();
  }
  {
    absl::MutexLock l(&mu_);
    if (!Connected(p.pipe->node[0], p.pipe->node[1])) {
      ++counters_.frames_lost;
      return;
    }
    ++counters_.frames_delivered;
    if (p.frame->has_update()) {
      ++counters_.update_frames;
      counters_.update_bytes += p.frame->ByteSizeLong();
    }
  }
  if (end) p.pipe->events[p.to]->OnFrame(end, *p.frame);
}

}  // namespace reckon::server
