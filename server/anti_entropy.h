// Anti-entropy's decisions (docs/protocol.md "Anti-entropy"), as pure
// functions of what the node knows, so each rule is tested on its own
// (tests/server/). The node applies them per member and origin on every
// heartbeat from that member, under its lock.
//
// Threads: pure functions, any thread. Errors: none; a decision is a value.
#ifndef RECKON_SERVER_ANTI_ENTROPY_H_
#define RECKON_SERVER_ANTI_ENTROPY_H_

#include <chrono>
#include <cstdint>

#include "server/member.h"

namespace reckon::server {

// What a member needs of one origin's messages.
struct RepairPlan {
  enum Kind {
    kNothing,  // it has, or was sent on this stream, all we have
    kRejoin,   // it lacks messages our log no longer holds: tell it to re-join
    kSend,     // send seqs [first, last] from the log, in order
  } kind = kNothing;
  uint64_t first = 0;  // kSend: first seq to send; kRejoin: our first retained seq
  uint64_t last = 0;   // kSend: the last (ours)
};

// `ours`: our applied seq of the origin; `theirs`: the member's (its last
// heartbeat); `pushed`: the highest we sent it on this stream and have no
// evidence of losing; `first_retained`: the lowest seq our log holds (0:
// none); `rejoin_told`: we told it to re-join for this origin already.
RepairPlan PlanRepair(uint64_t ours, uint64_t theirs, uint64_t pushed, uint64_t first_retained,
                      bool rejoin_told);

// Whether a message `age` old in our log may be relayed now to a member we
// have heard for `heard_for` (since it last connected or came back). Our own
// go at once; a dead or departed origin's once a repair timeout old. A live
// origin delivers (and repairs) its own to every member that hears it, so
// its messages are relayed only to a member that does not
// (`member_hears_origin`, from its heartbeat), once a failure timeout old and
// a failure timeout after the member came (time to reach the origin too).
// Age alone is not evidence: on a slow link the origin's copy may wait in its
// send queue longer than that, and a relayed copy doubles the load.
bool MayRelay(bool own, bool origin_alive, bool member_hears_origin, Clock::duration age,
              Clock::duration heard_for, std::chrono::milliseconds repair_timeout,
              std::chrono::milliseconds failure_timeout);

// MayRelay for the tree overlay (overlay.h). To a member we are the parent
// of in the origin's tree (`tree_child`, as our ring has it): at once, as the
// mesh sends our own. Our own to any other member: only as the backstop,
// once a failure timeout old and the member with us that long; its parent
// in the tree serves it, and when that parent fails the rings are rebuilt
// within a failure timeout. Age alone is not evidence of a failed tree: on
// a slow link a copy may wait that long in a parent's queue. Others'
// messages as MayRelay: their origin is their backstop.
bool MayRelayInTree(bool tree_child, bool own, bool origin_alive, bool member_hears_origin,
                    Clock::duration age, Clock::duration heard_for,
                    std::chrono::milliseconds repair_timeout,
                    std::chrono::milliseconds failure_timeout);

}  // namespace reckon::server

#endif  // RECKON_SERVER_ANTI_ENTROPY_H_
