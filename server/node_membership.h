// The gossip node's membership part (docs/architecture.md "The gossip node
// in parts"): who the members are and how we reach them. It owns the member
// table (member_table.h, with the streams waiting for their Hello), whom
// to dial and when (dial_schedule.h), the workers on their way in
// (joiners.h), the failure detector's verdicts and the tree's ring
// (overlay.h), and whether any peer of this cluster has taken us. A
// member's state changes here only, through the table.
//
// What it decides it does itself: dials (through the transport's Dialer),
// aborts streams it gives up on, counts (node_counters.h) and logs. What
// goes on the wire stays with the node: DialDue hands back the links it
// dialed for the node to send its Hello on.
//
// Threads: GossipNode holds one under its lock (NodeCore::mu) and calls it only so;
// not thread-safe on its own. The log sink and the counters it is given
// are thread-safe.
#ifndef RECKON_SERVER_NODE_MEMBERSHIP_H_
#define RECKON_SERVER_NODE_MEMBERSHIP_H_

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/dial_schedule.h"
#include "server/joiners.h"
#include "server/link.h"
#include "server/member.h"
#include "server/member_table.h"
#include "server/node_counters.h"
#include "server/node_options.h"
#include "server/overlay.h"
#include "server/version_vector.h"

namespace reckon::server {

class Membership {
 public:
  using LogSink = std::function<void(const std::string& line)>;
  // `options` and `counters` outlive it; `now`: when the node was made (a
  // member not reached is presumed alive for a failure timeout from then,
  // or from Start).
  Membership(const NodeOptions& options, OriginKey self, NodeCounterSet& counters, LogSink log,
             Clock::time_point now);

  // The node starts: seeds are learned (and pinned), our own address is
  // never dialed, and dials go through `dialer` from now on.
  void Start(Dialer dialer, Clock::time_point now);

  MemberTable& table() { return members_; }
  const MemberTable& table() const { return members_; }
  // The tree overlay's ring (overlay.h): us and every member alive to us.
  bool tree() const { return tree_; }
  const Ring& ring() const { return ring_; }
  const DialSchedule& dials() const { return dial_; }
  const Joiners& joiners() const { return joiners_; }
  // When the node began (Start): who it has not reached in a failure
  // timeout since is presumed gone.
  Clock::time_point started() const { return started_; }
  // Whether the node started with a transport that dials (Start).
  bool dials_out() const { return static_cast<bool>(dialer_); }
  // A new link to `address` (a lane), null when the transport cannot make
  // one or the node has not started.
  std::shared_ptr<Link> Dial(const std::string& address) const;

  // --- handshakes ---
  // `link` (accepted or dialed) waits for its Hello; streams past the cap
  // are aborted (pending_handshakes.h) and counted (handshakes_evicted).
  void AwaitHello(const std::shared_ptr<Link>& link, Clock::time_point now);
  // Aborts the accepted streams that said no Hello within hello_timeout
  // (hello_timeouts).
  void CloseSilentStreams(Clock::time_point now);
  // A Hello that JudgeHello admitted on `link`: the member it names (added
  // if new; a newer incarnation replaces the known one, whose links are
  // dropped), its address learned from the Hello. The link waits no more.
  Member& Admit(const std::shared_ptr<Link>& link, const v1::Hello& hello, Clock::time_point now);
  // `m`'s stream is attached: it is alive since `now` (returns whether it
  // was not before) and vouched for; the ring is rebuilt.
  bool Connected(Member& m, Clock::time_point now);
  // We dialed ourselves (our address is in the seed list): never again.
  void DialedSelf(const std::shared_ptr<Link>& link);
  // The peer we dialed on `link` refused us for good (`why`). A refusal
  // changes only what the refuser owns (docs/protocol.md section 3): its
  // address is not dialed again (dials_refused). Not OK only when this
  // node cannot be a member at all: no handshake has completed yet and
  // every configured seed has refused it (the node stops with it).
  absl::Status RefusedByDialed(const std::shared_ptr<Link>& link, const std::string& why);
  // The peer we dialed on `link` refused us for now, naming itself
  // `refuser`: when that is a member whose stream with us is up, the
  // address reaches it and is not dialed while the stream lasts
  // (DialSchedule::MemberAt). Anything else named changes nothing.
  void RefusedForNow(const std::shared_ptr<Link>& link, const OriginKey& refuser);
  // `link` closed: it waits for no Hello and is no dial in flight.
  void LinkClosed(const std::shared_ptr<Link>& link);

  // --- a member's state (the table's MarkAlive/MarkDead/MarkLeft) ---
  // A frame from `m` while it was not alive: alive again (the ring is
  // rebuilt). Returns whether it was not alive.
  bool HeardAgain(Member& m, Clock::time_point now);
  // `m` said Leave: its links are dropped.
  void Left(Member& m);
  // The failure detector, at a tick: a member silent past the failure
  // timeout is dead (its links dropped; members_failed); a name nobody
  // reached in that time is forgotten (names_forgotten).
  void DetectFailures(Clock::time_point now);
  // `m`'s links are dropped: its stream and lanes, and what we told it on them.
  static void DropLink(Member& m);

  // --- addresses ---
  // `m` listens at `address` (its Hello, or a heartbeat for a member never
  // reached): the old address is no longer dialed, the new one is (unless
  // max_targets are known: dial_targets_refused).
  void MoveMember(Member& m, const std::string& address, Clock::time_point now);
  // Aborts the dials that got no handshake in time, and dials the
  // addresses due: the links dialed, each waiting for its Hello, for the
  // node to send ours on. None before Start.
  std::vector<std::shared_ptr<Link>> DialDue(Clock::time_point now);

  // --- joiners (joiners.h) ---
  // A worker admitted by the service asked for a snapshot. Returns whether
  // it is recorded (a new one is logged).
  bool NoteJoiner(const std::string& node_id, uint64_t incarnation, Clock::time_point now);
  // Forgets the joiners that arrived or fell silent (joiners.h); the ids of
  // those still on their way.
  std::vector<std::string> JoinersStillComing(Clock::time_point now) {
    return joiners_.StillComing(members_.members(), now);
  }

  // --- what quiescence and the relay rules ask ---
  // Whether a configured seed (not us) has never been reached, and no peer
  // of this cluster ever took us.
  bool SeedsUnreached() const;
  // Whether `origin` (this incarnation) is us or a member alive to us.
  bool OriginAlive(const OriginKey& origin) const;
  // Whether `origin` may be alive though not alive to us: it is, or we have
  // not had a failure timeout to reach it since we began (or learned of its
  // member) and it is not known dead, gone or restarted.
  bool OriginMayBeAlive(const OriginKey& origin, Clock::time_point now) const;

 private:
  // `address` is dialed no more (unless it is a seed); a dial in flight to
  // it is aborted.
  void StopDialing(const std::string& address);
  // The ring is us and every member alive to us (tree overlay only).
  void RebuildRing();

  const NodeOptions& options_;
  const OriginKey self_;
  const bool tree_;
  NodeCounterSet& counters_;
  const LogSink log_;
  Dialer dialer_;
  MemberTable members_;
  Ring ring_;
  DialSchedule dial_;
  Joiners joiners_;
  Clock::time_point started_;
  // Whether a handshake has ever completed (a peer of this cluster took
  // us), and the configured seeds that refused us for good before one did
  // (RefusedByDialed).
  bool handshaken_once_ = false;
  std::set<std::string> seeds_refused_;
  // A member's stream was attached at least once (Connected).
  bool reached_any_ = false;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_NODE_MEMBERSHIP_H_
