// What a node knows of one other member of the cluster: its identity, the
// state the failure detector gives it, its links (member_links.h), and what
// its heartbeats said. A record: the member table (member_table.h) keeps
// one per member, by node id, under the node's lock, and alone changes its
// state; the node's parts (quiescence.h) read them.
//
// Threads: a plain record, read and written on the node thread under its
// lock (NodeCore::mu). Errors: none.
#ifndef RECKON_SERVER_MEMBER_H_
#define RECKON_SERVER_MEMBER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/link.h"
#include "server/member_links.h"
#include "server/version_vector.h"

namespace reckon::server {

// kConnecting: known (a seed's answer, a heartbeat's member list) but not
// reached yet; kAlive: handshaken and heard within the failure timeout;
// kDead: silent past it (its messages still flow through the logs); kLeft:
// said goodbye. Dead and left members count for nothing the live wait on.
enum class MemberState { kConnecting, kAlive, kDead, kLeft };
const char* MemberStateName(MemberState state);  // "connecting", "alive", ...

class MemberTable;
struct MemberTestAccess;

struct Member {
  std::string node_id;
  uint64_t incarnation = 0;
  std::string address;
  // Changed only by the member table (MemberTable::MarkAlive, MarkDead,
  // MarkLeft): the handshake's and the failure detector's verdicts.
  MemberState state() const { return state_; }
  // Somebody heard it: this node reached it, or a member this node reached
  // said in a heartbeat that it hears it (Member.heard). Only such a member
  // counts in the ending's majority (quiescence.h); a name nobody ever
  // heard (made up, an old pod's) counts for nothing. Kept across its
  // incarnations.
  bool vouched = false;
  Clock::time_point first_known, last_heard;
  VersionMap applied;  // from its last heartbeat
  // How many of our own messages behind us it is when its heartbeat lands:
  // our last seq then less the last of ours that heartbeat says it applied
  // (a round trip, and what it took to apply them, in our steps), smoothed
  // over its heartbeats (TrainingPort::PeerRoundTripSteps). Taken from its
  // heartbeats that say it applied one of ours at least; negative until
  // the first.
  double lag_at_heartbeat = -1;
  // Highest seq ever queued to it per origin, on any stream, in this
  // incarnation of it: anti-entropy's sends at or below it are resends
  // (Counters::repairs_resent), those above it first copies sent late.
  VersionMap ever_sent;
  // Its stream and lanes, and what belongs to them (member_links.h): a
  // new stream (or none) starts that afresh, nothing kept by hand.
  MemberLinks links;
  // The members its last heartbeat said it hears (Member.heard), and since
  // when we hear it (alive_since(): its stream with us began, or it came
  // back from dead): a live origin's messages are relayed to it only when it
  // does not hear that origin and has been with us a failure timeout
  // (anti_entropy.h MayRelay).
  std::set<OriginKey> hears;
  Clock::time_point alive_since() const { return alive_since_; }
  bool training_done = false;
  // Its last heartbeat's quiescence phase one, and its weight hash then.
  bool settled = false;
  std::string weight_hash;
  std::set<OriginKey> rejoin_told;  // told to re-join for these origins
  // Origins past a --max-origins cap (a member of a token cluster invented
  // more than it allows and showed us and it others): `refused_here`, those
  // its vector names that we refuse and will never apply; `refused_there`,
  // those of ours it said it refuses (Heartbeat.refused_origins). Neither is
  // sent to it, and both are left out when our vectors are compared for the
  // ending (quiescence.h VersionsAgree). Each a subset of a vector, so at
  // most --max-origins. `refused_untold`: refused_here found since our last
  // heartbeat to it.
  std::set<OriginKey> refused_here, refused_there;
  std::vector<OriginKey> refused_untold;
  bool Refuses(const OriginKey& origin) const { return refused_there.count(origin) > 0; }
  // Its latest replica check (Heartbeat.checked) not yet compared: we have
  // not applied that far yet. At most one, the newest.
  struct Check {
    VersionMap at;
    uint64_t checksum = 0;
  };
  std::optional<Check> pending_check;
  uint64_t checks_agreed = 0, checks_diverged = 0;

  // It restarted as `new_incarnation`: what the old incarnation said of
  // itself (its vector, training and quiescence) and what was sent to it
  // are forgotten. Its identity, address, state and times stay (its links,
  // if any, are the caller's to drop).
  void BeginIncarnation(uint64_t new_incarnation) {
    incarnation = new_incarnation;
    applied.clear();
    lag_at_heartbeat = -1;
    ever_sent.clear();
    training_done = false;
    settled = false;
    weight_hash.clear();
    refused_here.clear();
    refused_there.clear();
    refused_untold.clear();
  }

 private:
  friend class MemberTable;
  friend struct MemberTestAccess;  // the tests of the parts that read members
  MemberState state_ = MemberState::kConnecting;
  Clock::time_point alive_since_;
};

// By node id, never our own; member_table.h owns the node's.
using MemberMap = std::map<std::string, Member>;

}  // namespace reckon::server

#endif  // RECKON_SERVER_MEMBER_H_
