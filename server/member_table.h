// The member table and its handshakes (docs/architecture.md "The gossip node
// in parts"): every other member the node knows, by node id (never itself),
// at most `max_members` of them, and the streams waiting for their Hello
// (pending_handshakes.h). It owns both and applies membership's rules
// (membership.h) to them: whom a Hello admits and as which incarnation,
// what a heartbeat's member list teaches, which member a stream belongs to,
// who is alive; and it alone changes a member's state (MarkAlive, MarkDead,
// MarkLeft: Member::state() is read-only elsewhere). What is done about
// each answer (dials, counters, log lines: node_membership.h; frames to
// send: the node) stays with its callers.
//
// The read-only rules of other parts (quiescence.h, joiners.h, lanes.h)
// take the plain map (`members()`), so they are tested without a table.
//
// Threads: the node's membership part (node_membership.h) holds it, under
// the node's lock (NodeCore::mu); not thread-safe on its own.
#ifndef RECKON_SERVER_MEMBER_TABLE_H_
#define RECKON_SERVER_MEMBER_TABLE_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "proto/reckon.pb.h"
#include "server/link.h"
#include "server/member.h"
#include "server/membership.h"
#include "server/pending_handshakes.h"
#include "server/version_vector.h"

namespace reckon::server {

class MemberTable {
 public:
  struct Options {
    OriginKey self;
    size_t max_members = 1024;  // NodeOptions::max_members
    PendingHandshakes::Options handshakes;
  };
  explicit MemberTable(Options options);

  // --- the members, in node-id order ---
  MemberMap::iterator begin() { return members_.begin(); }
  MemberMap::iterator end() { return members_.end(); }
  MemberMap::const_iterator begin() const { return members_.begin(); }
  MemberMap::const_iterator end() const { return members_.end(); }
  const MemberMap& members() const { return members_; }
  size_t size() const { return members_.size(); }
  Member* Find(const std::string& node_id);
  const Member* Find(const std::string& node_id) const;
  // The member whose stream `link` is (not a lane's); null when none.
  Member* FindByStream(const std::shared_ptr<Link>& link);
  // Whether `origin` is the incarnation of a member we handshook with (a
  // member only heard of has none yet).
  bool IsCurrent(const OriginKey& origin) const;
  // Whether `origin` is a member's current incarnation and alive to us.
  bool IsAlive(const OriginKey& origin) const;
  size_t CountAlive() const;
  // The ids of the members alive to us, in order (the tree's ring).
  std::vector<std::string> AliveIds() const;
  // The addresses of the members alive now, but `except`.
  std::vector<std::string> LiveAddresses(const std::string& except) const;
  // Whether a member listening at `address`, or `reached_there` (the
  // member a dial of `address` reached: DialSchedule::MemberAt; empty for
  // none), has its stream up, or left (it is not to be dialed there).
  bool ConnectedOrLeftAt(const std::string& address, const std::string& reached_there) const;

  // --- handshakes (pending_handshakes.h) ---
  // `link` opened at `now` and waits for its Hello: the links to close to
  // stay within the cap (no longer held).
  std::vector<std::shared_ptr<Link>> AwaitHello(const std::shared_ptr<Link>& link,
                                                Clock::time_point now) {
    return handshakes_.Add(link, now);
  }
  bool AwaitsHello(const std::shared_ptr<Link>& link) const { return handshakes_.Contains(link); }
  // Its Hello was judged, or it closed: it waits no more.
  void StopAwaiting(const std::shared_ptr<Link>& link) { handshakes_.Remove(link); }
  // Accepted streams silent past hello_timeout, no longer held.
  std::vector<std::shared_ptr<Link>> TakeSilent(Clock::time_point now) {
    return handshakes_.TakeExpired(now);
  }
  std::vector<std::shared_ptr<Link>> AwaitingHello() const { return handshakes_.All(); }

  // --- a member's state: the handshake's and the failure detector's
  // verdicts, the only ways it changes ---
  // Handshaken (a new stream, alive or not before), or heard again after
  // it was dead or left: alive since `now` (the relay rules count from
  // then). Returns whether it was not alive before.
  bool MarkAlive(Member& m, Clock::time_point now);
  // Silent past the failure timeout (its links are the caller's to drop).
  void MarkDead(Member& m) { m.state_ = MemberState::kDead; }
  // It said Leave (its links are the caller's to drop).
  void MarkLeft(Member& m) { m.state_ = MemberState::kLeft; }

  // --- the rules that change the table ---
  // Section 3's checks (membership.h JudgeHello) for `hello`, against this
  // table: `context`'s self, members and cap are filled in here.
  HelloVerdict Judge(const v1::Hello& hello, HelloContext context) const;
  // A Hello that Judge admitted on `link`: the member it names, added
  // (known since `now`) if new; a newer incarnation than the one known
  // begins here (restarted: what the old one said is forgotten, its links
  // are the caller's to drop). The link waits for its Hello no more.
  struct Admitted {
    Member* member = nullptr;
    bool restarted = false;  // a known incarnation was replaced
    // The address of a name nobody heard that gave way to it (the table
    // was full): the caller stops dialing it. Empty when none.
    std::string gave_way;
  };
  Admitted Admit(const std::shared_ptr<Link>& link, const v1::Hello& hello, Clock::time_point now);
  // Whether `m` is only a name: never reached by us (no incarnation), heard
  // by nobody (not vouched), not connected. Such a name gives way to a
  // real member when the table is full, and is forgotten once it is dead.
  static bool OnlyAName(const Member& m);
  // Forgets a member (OnlyAName and dead); returns its address. Its name
  // is not learned again from lists that do not hear it (the last
  // max_members names forgotten are remembered).
  std::string Forget(const std::string& id);
  // The member list of a heartbeat from `from` (membership.h
  // LearnMemberList, within max_members).
  ListLearned Learn(Member& from, const google::protobuf::RepeatedPtrField<v1::Member>& list,
                    Clock::time_point now);

 private:
  const Options options_;
  MemberMap members_;
  // Names forgotten (Forget), the last max_members of them, oldest first.
  std::set<std::string> forgotten_;
  std::deque<std::string> forgotten_order_;
  PendingHandshakes handshakes_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_MEMBER_TABLE_H_
