// Whom to dial and when (docs/protocol.md "Failure detection"): every address
// the node has learned (seeds, Hellos, heartbeats' member lists), each with
// its own exponential backoff and jitter, at most one dial in flight per
// address, and a deadline on every dial, so a peer that accepts and never
// answers (stopped, starved, half-partitioned) does not block its address.
//
// Pure bookkeeping: the node's membership part (node_membership.h) calls it
// under the node's lock, with its clock, and does the dialing (and
// aborting) itself. Not thread-safe.
#ifndef RECKON_SERVER_DIAL_SCHEDULE_H_
#define RECKON_SERVER_DIAL_SCHEDULE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "server/link.h"
#include "server/member.h"

namespace reckon::server {

class DialSchedule {
 public:
  struct Options {
    std::chrono::milliseconds initial_backoff{100};
    std::chrono::milliseconds max_backoff{2000};
    // A dial without a completed handshake this long after it went out is
    // abandoned (and dialed again after its backoff).
    Clock::duration deadline = std::chrono::seconds(6);
    // Addresses known at most (seeds included): every one is dialed again
    // and again while not connected, so what peers announce cannot grow it
    // without bound (docs/gossip.md "Threat model").
    size_t max_targets = 4096;
    // Dials out at once at most (each is a channel and a connection: a
    // member list can name a thousand made-up addresses). Due hands out
    // the rest in turn, round robin.
    size_t max_in_flight = 64;
  };
  DialSchedule(Options options, uint64_t jitter_seed);

  // From now on `address` is dialed whenever it is due and not connected;
  // due at `now`. No-op for one known already or one of ours.
  // Returns false when it was not learned because max_targets are known
  // (the caller counts it).
  bool Learn(const std::string& address, Clock::time_point now);
  // `address` (a seed, given by the operator) is never forgotten.
  void Pin(const std::string& address) { pinned_.insert(address); }
  // Stops dialing `address` (a member moved away from it: an old pod IP),
  // unless it is pinned. Returns its dial in flight, if any, for the
  // caller to abort.
  std::shared_ptr<Link> Forget(const std::string& address);
  size_t targets() const { return targets_.size(); }
  // One of this node's own addresses: never dialed.
  void MarkSelf(const std::string& address);
  bool IsSelf(const std::string& address) const { return self_.count(address) > 0; }
  bool Knows(const std::string& address) const { return targets_.count(address) > 0; }

  // The addresses to dial now: known, not ours, no dial in flight, past
  // their next attempt, and not `connected`; at most max_in_flight dials
  // out in all, taken round robin from where the last call stopped (one
  // that waits for a slot is counted in deferred()). Each one's backoff
  // grows (initial, doubling to max, +-25% jitter) as it is handed out; the
  // caller then dials it and reports the link with Dialed.
  std::vector<std::string> Due(Clock::time_point now,
                               const std::function<bool(const std::string&)>& connected);
  void Dialed(const std::string& address, std::shared_ptr<Link> link, Clock::time_point now);
  // The link's handshake completed with member `node_id`: its address
  // starts again from the initial backoff next time, and reaches that
  // member (MemberAt). Returns the address it was dialed for (empty for a
  // link this schedule did not dial).
  std::string Handshaken(const std::shared_ptr<Link>& link, const std::string& node_id);
  // The link reached member `node_id`, which has a stream with us already
  // and refused this one for now: its address reaches that member.
  void ReachedMember(const std::shared_ptr<Link>& link, const std::string& node_id);
  // The member whose handshake or refusal last came from `address` (empty:
  // none). A member may be reached at an address other than the one it
  // advertises (a seed resolved to its IP, its DNS name in its Hello): the
  // caller's `connected` (Due) says such an address is connected while that
  // member's stream is up, so it is not dialed only to be refused.
  const std::string& MemberAt(const std::string& address) const;
  // The peer the link reached refused this node for good: its address is
  // not dialed again, nor learned again, pinned (a seed) or not. Returns
  // the address the link was dialed for (empty for a link this schedule
  // did not dial). At most max_targets addresses are remembered as
  // refused; past that one is only forgotten (learned again, it costs a
  // dial and is refused again).
  std::string Refused(const std::shared_ptr<Link>& link);
  bool IsRefused(const std::string& address) const { return refused_.count(address) > 0; }
  // The link turned out to reach this node itself: its address is ours.
  void DialedSelf(const std::shared_ptr<Link>& link);
  // The link ended, for whatever reason.
  void Closed(const std::shared_ptr<Link>& link);

  struct Expired {
    std::string address;
    std::shared_ptr<Link> link;
    Clock::duration waited;
  };
  // Dials past the deadline, forgotten here: the caller aborts them.
  std::vector<Expired> TakeExpired(Clock::time_point now);
  // Every dial in flight (the node closes them when it stops).
  std::vector<std::shared_ptr<Link>> Pending() const;
  // Due addresses that waited for a slot (max_in_flight), so far.
  uint64_t deferred() const { return deferred_; }

 private:
  struct Target {
    Clock::time_point next_attempt;
    std::chrono::milliseconds backoff{0};
    std::shared_ptr<Link> pending;  // dialed, handshake not finished
    Clock::time_point pending_since;
    std::string member;  // MemberAt
  };
  const Options options_;
  std::mt19937_64 jitter_;
  std::map<std::string, Target> targets_;  // by address
  std::set<std::string> self_;
  std::set<std::string> pinned_;
  std::set<std::string> refused_;  // by address; at most max_targets
  std::string resume_after_;       // Due's round robin: where the last hand-out stopped
  uint64_t deferred_ = 0;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_DIAL_SCHEDULE_H_
