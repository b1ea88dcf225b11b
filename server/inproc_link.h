// Links between gossip nodes of one process: the node's logic tested without
// sockets or processes (gloo keeps a same-shaped transport beside its real
// ones for the same reason). A link is one end of a pipe; what one end Sends,
// the other end's node receives through OnFrame, in order.
//
// An InProcNetwork plays the part of the network:
//   - Listen(address, node) makes a node dialable at `address`;
//   - MakeDialer(node) is the Dialer the node is started with;
//   - a one-way latency (0: frames are handed over inside Send);
//   - DelayUpdates(from, to, delay): Update frames one way arrive that much
//     later still, as behind a long send queue that heartbeats overtake
//     (Link::SendUrgent does that on the real transport);
//   - Partition(groups): frames between groups vanish silently, as on a cut
//     link (no close, no error: the failure detector must notice), and dials
//     across get no answer; Cut(a, b) does that for one pair; Heal() ends it.
//
// Threads: Send, Close and Abort may be called from any thread, under the
// calling node's lock: they only call the receiving nodes' On* reactions,
// which take nothing but the inbox lock (a leaf), so no lock cycle can form.
// With a latency, one thread ("reckon-inproc") delivers due frames, or the
// caller of DeliverDue.
//
// REQUIRES: every node is stopped (GossipNode::Stop) before the network is
// destroyed, and the network outlives every node's Stop.
#ifndef RECKON_SERVER_INPROC_LINK_H_
#define RECKON_SERVER_INPROC_LINK_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/link.h"
#include "server/node.h"
#include "server/timed_queue.h"

namespace reckon::server {

class InProcNetwork {
 public:
  // `clock`: the time latencies and delays are counted on (the nodes'
  // NodeOptions::clock, so a test that moves time moves frames too); the
  // steady clock when empty.
  explicit InProcNetwork(std::chrono::milliseconds latency = std::chrono::milliseconds(0),
                         std::function<Clock::time_point()> clock = nullptr);
  ~InProcNetwork();
  InProcNetwork(const InProcNetwork&) = delete;
  InProcNetwork& operator=(const InProcNetwork&) = delete;

  // `node` accepts dials at `address` once started; its accepted links'
  // events go to `events` (default: the node).
  void Listen(const std::string& address, GossipNode* node, LinkEvents* events = nullptr);
  // Dials for `node` (partitions know it by this), events to `events`.
  Dialer MakeDialer(GossipNode* node, LinkEvents* events = nullptr);

  // Nodes in different groups can no longer exchange anything (frames in
  // flight across are lost too). A node in no group is cut from everyone.
  void Partition(const std::vector<std::set<GossipNode*>>& groups);
  // Only `a` and `b` can no longer reach each other (both still reach the
  // rest): an asymmetric partition. Heal() ends it too.
  void Cut(GossipNode* a, GossipNode* b);
  void Heal();
  // From now on, Update frames `from` sends `to` arrive `delay` later than
  // the others (call it before they talk: a change mid-stream reorders).
  void DelayUpdates(GossipNode* from, GossipNode* to, std::chrono::milliseconds delay);
  // Every frame due by now on the network's clock is in its receiver's
  // inbox when this returns (TimedQueue::DeliverDue): a test that moves the
  // clock makes the move's arrivals before it looks at the nodes.
  void DeliverDue() { in_flight_->DeliverDue(); }

  struct Counters {
    uint64_t frames_delivered = 0, frames_lost = 0, update_frames = 0, update_bytes = 0;
  };
  Counters counters();

  // Internal: one pipe between two nodes (defined in the .cc).
  struct Pipe;

 private:
  friend class InProcLink;
  struct Pending {
    std::shared_ptr<Pipe> pipe;
    int to;                                        // the end that receives
    std::shared_ptr<const v1::GossipFrame> frame;  // null: the pipe's close
  };

  std::shared_ptr<Link> Dial(GossipNode* from, LinkEvents* events, const std::string& address);
  bool Connected(GossipNode* a, GossipNode* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Send's and Close's path: now (no latency) or through the delivery queue.
  bool Transfer(const std::shared_ptr<Pipe>& pipe, int to,
                std::shared_ptr<const v1::GossipFrame> frame);
  void Deliver(Pending p);

  const std::chrono::milliseconds latency_;
  absl::Mutex mu_;
  struct Listener {
    GossipNode* node;
    LinkEvents* events;
  };
  std::map<std::string, Listener> listeners_ ABSL_GUARDED_BY(mu_);
  std::map<GossipNode*, int> group_of_ ABSL_GUARDED_BY(mu_);  // empty: no partition
  bool partitioned_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::pair<GossipNode*, GossipNode*>> cuts_ ABSL_GUARDED_BY(mu_);  // both orders
  std::map<std::pair<GossipNode*, GossipNode*>, std::chrono::milliseconds> update_delay_
      ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
  // Frames on their way, with a latency or delay (last: stopped first when
  // destroyed).
  std::unique_ptr<TimedQueue<Pending>> in_flight_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_INPROC_LINK_H_
