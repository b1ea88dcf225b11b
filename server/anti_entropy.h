// Anti-entropy's decisions (docs/protocol.md "Anti-entropy"), as pure
// functions of what the node knows, so each rule is tested on its own
// (gossip_parts_test). The node applies them per member and origin on every
// heartbeat from that member, under its lock.
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
    kResync,   // it lacks messages our log no longer holds: tell it to re-join
    kSend,     // send seqs [first, last] from the log, in order
  } kind = kNothing;
  uint64_t first = 0;  // kSend: first seq to send; kResync: our first retained seq
  uint64_t last = 0;   // kSend: the last (ours)
};

// `ours`: our applied seq of the origin; `theirs`: the member's (its last
// heartbeat); `pushed`: the highest we sent it on this stream and have no
// evidence of losing; `first_retained`: the lowest seq our log holds (0:
// none); `resync_told`: we told it to re-join for this origin already.
RepairPlan PlanRepair(uint64_t ours, uint64_t theirs, uint64_t pushed, uint64_t first_retained,
                      bool resync_told);

// How long a message must have been in our log before we relay it. Our own
// go at once. Another origin's is most likely still on its way to the
// member straight from its origin: a live origin delivers (and repairs) its
// own, so its messages wait a failure timeout (covering a member the
// origin cannot reach); a dead or departed origin's wait a repair timeout.
Clock::duration RelayDelay(bool own, bool origin_alive, std::chrono::milliseconds repair_timeout,
                           std::chrono::milliseconds failure_timeout);

}  // namespace reckon::server

#endif  // RECKON_SERVER_ANTI_ENTROPY_H_
