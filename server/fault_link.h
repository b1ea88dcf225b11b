// Test faults (reckon-worker --fault-*), as links that misbehave on purpose
// around the real ones (leveldb's ErrorEnv, for a transport): the failure
// tests make a node duplicate, delay (and so reorder), corrupt, or die halfway
// through a broadcast, and the node itself has no test code in it.
//
// A FaultInjector sits between a transport and its node: the transport
// reports events to the injector (it is a LinkEvents), which wraps each link
// in a FaultLink and reports the wrapped one to the node; Wrap(dialer) does
// the same for dialed links. Sends on a FaultLink go through the faults.
//
// Threads: as for any Link and LinkEvents. One thread of its own
// (TimedQueue, "reckon-faults") sends delayed frames when due.
#ifndef RECKON_SERVER_FAULT_LINK_H_
#define RECKON_SERVER_FAULT_LINK_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/link.h"
#include "server/timed_queue.h"
#include "server/version_vector.h"

namespace reckon::server {

struct FaultOptions {
  // Send this seq of our own to one peer only, then fall silent and _Exit(86)
  // (a crash halfway through a broadcast).
  uint64_t die_after_partial_send_seq = 0;
  uint64_t corrupt_seq = 0;            // send a corrupt copy of this seq of ours first
  double duplicate_probability = 0;    // send an Update twice
  double delay_probability = 0;        // hold an Update back...
  int max_delay_ms = 0;                // ...for up to this long (reorders)
  bool any() const {
    return die_after_partial_send_seq != 0 || corrupt_seq != 0 || duplicate_probability > 0 ||
           (delay_probability > 0 && max_delay_ms > 0);
  }
};

class FaultLink;

class FaultInjector final : public LinkEvents {
 public:
  // `self`: this node's origin (the seq faults act on its own Updates).
  // `node`: where the wrapped links' events go. REQUIRES: it outlives this.
  FaultInjector(FaultOptions options, OriginKey self, LinkEvents* node, uint64_t seed);
  ~FaultInjector() override;

  // A dialer whose links are wrapped. `inner` must report to this injector.
  Dialer Wrap(Dialer inner);

  void OnLinkUp(const std::shared_ptr<Link>& link) override;
  bool OnFrame(const std::shared_ptr<Link>& link, v1::GossipFrame frame) override;
  void OnLinkClosed(const std::shared_ptr<Link>& link, const std::string& why) override;

 private:
  friend class FaultLink;
  // The wrapper of `inner`, made on first sight (events may precede the
  // dialer's return).
  std::shared_ptr<FaultLink> OuterOf(const std::shared_ptr<Link>& inner);
  bool Send(const std::shared_ptr<Link>& inner, const std::string& describe,
            std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap);
  // Holds a copy back a random while (the delay fault), or returns false.
  bool Delay(const std::shared_ptr<Link>& inner,
             const std::shared_ptr<const v1::GossipFrame>& frame, size_t byte_cap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DieAfterFlush(std::shared_ptr<Link> link);

  const FaultOptions options_;
  const OriginKey self_;
  LinkEvents* const node_;
  absl::Mutex mu_;
  std::map<const Link*, std::weak_ptr<FaultLink>> outer_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  bool silenced_ ABSL_GUARDED_BY(mu_) = false;  // dying: nothing more goes out
  struct Delayed {
    std::weak_ptr<Link> inner;
    std::shared_ptr<const v1::GossipFrame> frame;
    size_t byte_cap;
  };
  void SendDelayed(Delayed& d);
  // Last: stopped first when destroyed.
  TimedQueue<Delayed> delayed_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_FAULT_LINK_H_
