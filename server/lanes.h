// Lanes (docs/protocol.md "Lanes"): extra streams a node dials to a member it
// sends big Updates to, each its own TCP connection, because one connection
// cannot fill a long fat link (its send buffer and congestion window bound
// it to a window per round trip: 443 Mbit/s of 1 Gbit/s at 50 ms RTT,
// docs/scaling.md "Long fat links").
//
// A lane carries Updates only, one way: the dialer sends, the acceptor
// receives them through the same validation and in-order acceptance as the
// pair's stream (messages that overtake one another across lanes wait in
// the early-arrival buffer). Everything else (heartbeats, membership,
// certificates, Leave) stays on the pair's stream, and a lane lives only
// while that stream does. The decisions are pure functions here, tested on
// their own (tests/server/); the node applies them under its lock.
//
// Threads: pure functions, any thread (the node calls them on its thread,
// under its lock). Errors: a refused lane is LaneRefusal's reason, named.
#ifndef RECKON_SERVER_LANES_H_
#define RECKON_SERVER_LANES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "proto/reckon.pb.h"
#include "server/member.h"
#include "server/membership.h"

namespace reckon::server {

// Lanes per direction of a pair, at most (Hello.lane is 1..kMaxLanes).
constexpr uint32_t kMaxLanes = 16;

// Why the acceptor refuses `hello` (lane() > 0, its fingerprint and token
// already checked) as a lane, never permanent, with the counter it adds to
// (peers_refused for a lane past kMaxLanes, which no member dials;
// peers_refused_for_now for one that raced its stream or a restart);
// nullopt: it is a lane of a member whose stream with us is up, of the
// same incarnation.
std::optional<HelloVerdict> LaneRefusal(const v1::Hello& hello, const MemberMap& members);

// Which link carries an Update frame of `bytes`: 0, the pair's stream, for
// one under `min_bytes` or when no lane is up; else the one of the stream
// and the lanes up with the fewest bytes queued. Ties go round: the first
// from index `turn` % queued.size() on (the caller counts its frames), so
// links that all drain at once still share the load. `queued[0]` is the
// stream's, `queued[i]` lane i's (nullopt: not up).
uint32_t PickLane(size_t bytes, size_t min_bytes, const std::vector<std::optional<size_t>>& queued,
                  uint64_t turn);

// Loss evidence across lanes. `frontier[i]`: the Update frames sent on link
// i (0: the stream) when a message went out; `stream_received` and
// `lanes_received` (entry i-1: lane i): what the member's heartbeat says it
// processed. True when it processed every frame up to the frontier on every
// link: then whatever of that origin it still lacks was lost, not late
// (frames stay in order on each link, not across them).
bool ProcessedThrough(const std::vector<uint64_t>& frontier, uint64_t stream_received,
                      const google::protobuf::RepeatedField<uint64_t>& lanes_received);

}  // namespace reckon::server

#endif  // RECKON_SERVER_LANES_H_
