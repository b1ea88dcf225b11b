// A peer the test writes frame by frame: a hostile or buggy member, played
// against a real GossipNode with no sockets. It stands on an accepted link
// of the node (the node answers its Hello), sends what the test says, and
// keeps what the node sends it.
#ifndef RECKON_TESTS_SCRIPTED_PEER_H_
#define RECKON_TESTS_SCRIPTED_PEER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/link.h"
#include "server/node.h"

namespace reckon::server {

class ScriptedLink final : public Link, public std::enable_shared_from_this<ScriptedLink> {
 public:
  explicit ScriptedLink(GossipNode* node) : node_(node) {}
  bool Send(std::shared_ptr<const v1::GossipFrame> frame, size_t) override {
    absl::MutexLock l(&mu_);
    if (closed_) return false;
    sent_.push_back(std::move(frame));
    return true;
  }
  size_t QueuedBytes() const override { return 0; }
  void Close() override { End("closed by the node"); }
  void Abort() override { End("aborted by the node"); }
  bool dialed() const override { return false; }  // the node accepted it
  std::string Describe() const override { return "scripted peer"; }

  // What the node sent on this link so far.
  std::vector<std::shared_ptr<const v1::GossipFrame>> sent() {
    absl::MutexLock l(&mu_);
    return sent_;
  }
  bool closed() {
    absl::MutexLock l(&mu_);
    return closed_;
  }

 private:
  void End(const std::string& why) {
    {
      absl::MutexLock l(&mu_);
      if (closed_) return;
      closed_ = true;
    }
    node_->service().OnLinkClosed(shared_from_this(), why);
  }

  GossipNode* const node_;
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<const v1::GossipFrame>> sent_ ABSL_GUARDED_BY(mu_);
};

// A RejoinRequired frame: the sender says we lack the messages of origin
// (node_id, incarnation) before `first_retained`, which its log no longer
// holds.
inline v1::GossipFrame RejoinRequiredFrame(const std::string& node_id, uint64_t incarnation,
                                           uint64_t first_retained) {
  v1::GossipFrame f;
  f.mutable_rejoin()->mutable_origin()->set_node_id(node_id);
  f.mutable_rejoin()->mutable_origin()->set_incarnation(incarnation);
  f.mutable_rejoin()->set_first_retained_seq(first_retained);
  return f;
}

class ScriptedPeer {
 public:
  // Opens a link to `node` and says Hello as (id, incarnation) at `address`.
  ScriptedPeer(GossipNode* node, const std::string& id, uint64_t incarnation,
               const std::string& address)
      : node_(node), link_(std::make_shared<ScriptedLink>(node)) {
    node_->service().OnLinkUp(link_);
    v1::GossipFrame hello;
    *hello.mutable_hello()->mutable_fingerprint() = node->options().fingerprint;
    hello.mutable_hello()->mutable_self()->set_node_id(id);
    hello.mutable_hello()->mutable_self()->set_incarnation(incarnation);
    hello.mutable_hello()->set_listen_address(address);
    hello.mutable_hello()->set_cluster_token(node->options().cluster_token);
    Send(std::move(hello));
  }
  void Send(v1::GossipFrame frame) { node_->service().OnFrame(link_, std::move(frame)); }
  void SendUpdate(const v1::Update& update) {
    v1::GossipFrame frame;
    *frame.mutable_update() = update;
    Send(std::move(frame));
  }
  ScriptedLink& link() { return *link_; }
  // Its stream ends, as when its process does.
  void Close(const std::string& why = "scripted peer gone") {
    node_->service().OnLinkClosed(link_, why);
  }

 private:
  GossipNode* const node_;
  std::shared_ptr<ScriptedLink> link_;
};

}  // namespace reckon::server

#endif  // RECKON_TESTS_SCRIPTED_PEER_H_
