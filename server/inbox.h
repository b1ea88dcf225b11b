// The node's inbox (docs/gossip.md "Threads and locks"): what the links
// report (a stream up, a frame, a stream closed), queued by transport
// threads and taken in batches by the node thread, in arrival order.
//
// Flow control, not drops: a link whose frames waiting here exceed its
// share of `byte_cap` (the cap over the links with frames waiting) is
// paused (PushFrame returns false, and the transport stops reading it);
// Take hands the paused links back with the batch, and the node thread
// resumes them once it handled that batch. The inbox so holds at most
// byte_cap plus one frame per link (counted: pauses).
//
// Threads: Push* from any thread (link reactions, possibly run inline inside
// a Link call the node thread makes under the node's lock); Take and the
// rest from the node thread or its owner. One mutex of its own, never held
// while calling out: the node's lock order is its lock before this one, and
// a transport thread enqueueing a frame never waits behind the node's lock.
#ifndef RECKON_SERVER_INBOX_H_
#define RECKON_SERVER_INBOX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/reckon.pb.h"
#include "server/link.h"
#include "server/member.h"
#include "server/update_validation.h"

namespace reckon::server {

class Inbox {
 public:
  struct Event {
    enum Kind { kUp, kFrame, kClosed } kind;
    std::shared_ptr<Link> link;
    v1::GossipFrame frame;
    std::string why;
    size_t frame_bytes = 0;  // frame.ByteSizeLong() (the wire's), taken once on arrival
    // An Update's validation, when the node's receive path ran it off its
    // lock (GossipNode::ValidateUpdates); empty from the inbox.
    std::optional<ValidatedUpdate> validated;
  };
  struct Batch {
    std::deque<Event> events;
    // Links paused for frames in `events`: to resume once they are handled
    // (their memory released first).
    std::vector<std::shared_ptr<Link>> to_resume;
  };

  // `clock`: the node's protocol time (NodeOptions::clock), for arrival
  // times and Take's `wake`; it waits for real as long as `clock` says is
  // left, but never longer than `max_wait` at once: an injected clock moves
  // without telling anyone, and is seen moved within that (unbounded for
  // the steady clock, which only moves as the wait does).
  Inbox(size_t byte_cap, std::function<Clock::time_point()> clock,
        Clock::duration max_wait = Clock::duration::max())
      : byte_cap_(byte_cap), clock_(std::move(clock)), max_wait_(max_wait) {}

  // What a frame waiting here costs as allocated (server/held_bytes.h): what
  // the caps count, not its wire size.
  static size_t MemoryOf(const v1::GossipFrame& frame);

  void PushUp(const std::shared_ptr<Link>& link);
  // False: the link is over its share now and must pause reading.
  bool PushFrame(const std::shared_ptr<Link>& link, v1::GossipFrame frame);
  void PushClosed(const std::shared_ptr<Link>& link, const std::string& why);
  // Ends the node thread's wait now, with no event (it has work of its own
  // waiting: our own messages to push).
  void Wake();

  // Waits until something is queued, `wake`, or Stop, then moves out every
  // event queued (possibly none, at `wake`). False once stopped: `out` is
  // then left empty.
  bool Take(Clock::time_point wake, Batch* out);
  // Take returns false from now on (a waiting one at once); links closed
  // from now on are remembered (ClosedSinceStop).
  void Stop();
  // Whether every link of `links` reported its close since Stop.
  bool ClosedSinceStop(const std::vector<std::shared_ptr<Link>>& links);

  // When each link last delivered a frame, as it arrived (not as the node
  // thread got to it): a peer whose frames wait in a backlog is slow to be
  // processed, not silent. Identity only; Forget erases a closed link's.
  std::map<const Link*, Clock::time_point> LastArrivals();
  void Forget(const Link* link);

  // For a test that moves a manual clock (tests/inproc_cluster.h
  // StepUntil): the count of events pushed so far when the node thread
  // waits in Take with nothing queued, not woken, and its `wake` still
  // ahead on the clock (or once stopped), so that everything that arrived
  // has been handled; nullopt while it has work. Two looks with the same
  // count: nothing arrived in between.
  std::optional<uint64_t> IdleForTesting();

  size_t bytes();     // memory of the frames waiting now (MemoryOf)
  uint64_t pauses();  // links paused so far

 private:
  const size_t byte_cap_;
  const std::function<Clock::time_point()> clock_;
  const Clock::duration max_wait_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  // The node thread waits in Take for `wake_` (IdleForTesting).
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point wake_ ABSL_GUARDED_BY(mu_);
  uint64_t events_in_ ABSL_GUARDED_BY(mu_) = 0;  // pushed since made
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  // Links whose stream ended since Stop (identity only, never dereferenced).
  std::set<const Link*> closed_since_stop_ ABSL_GUARDED_BY(mu_);
  std::map<const Link*, Clock::time_point> last_arrival_ ABSL_GUARDED_BY(mu_);
  // Memory waiting (MemoryOf), in all and per link (identity only), and links paused.
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<const Link*, size_t> link_bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Link>> paused_ ABSL_GUARDED_BY(mu_);
  uint64_t pauses_ ABSL_GUARDED_BY(mu_) = 0;
};

// Moves the first events of `events` into the returned slice: as many as
// keep the decoded form of their Updates (4 bytes an update of a threshold
// codec, as many as it claims up to `param_count`; 8 bytes a parameter for
// the quanta codecs, 64x a onebit frame) within `decoded_cap`, and at least
// one. The node validates a batch slice by slice: the inbox may hold its cap
// of frames, and decoded all at once they could take 64x that.
struct Slice {
  std::deque<Inbox::Event> events;
  size_t decoded_bytes = 0;  // their Updates' decoded form, as counted above
};
Slice TakeSlice(std::deque<Inbox::Event>* events, uint64_t param_count, size_t decoded_cap);

}  // namespace reckon::server

#endif  // RECKON_SERVER_INBOX_H_
