// Workers on their way in: each asked this node for a snapshot (a join) and
// has not completed a handshake since. A finished node waits for them
// (quiescence.h, LocalQuiescence::joining): without that, nodes that had
// finished ended while a joiner installed its snapshot, leaving it nobody to
// reach. Each is waited for at most `patience` (a failure timeout) after
// its last request, so a probe that never comes holds nobody for long; at
// most `cap` are noted at once (a flood of made-up requesters is not).
//
// Not thread-safe: the node's membership part (node_membership.h) owns one,
// called under the node's lock.
#ifndef RECKON_SERVER_JOINERS_H_
#define RECKON_SERVER_JOINERS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "server/member.h"

namespace reckon::server {

class Joiners {
 public:
  struct Joiner {
    uint64_t incarnation = 0;
    Clock::time_point last_request;
  };
  enum class Noted { kNew, kAgain, kFull };

  Joiners(size_t cap, Clock::duration patience) : cap_(cap), patience_(patience) {}

  // `node_id` asked for a snapshot as `incarnation` at `now`: kNew (the
  // caller says so in its log), kAgain (its wait starts again), or kFull
  // (`cap` are waited for already: not noted).
  Noted Note(const std::string& node_id, uint64_t incarnation, Clock::time_point now);
  // Forgets those that arrived (a member of that id and incarnation that is
  // no longer connecting) and those silent past `patience`; the ids of the
  // others, still on their way.
  std::vector<std::string> StillComing(const MemberMap& members, Clock::time_point now);
  const std::map<std::string, Joiner>& all() const { return joiners_; }

 private:
  const size_t cap_;
  const Clock::duration patience_;
  std::map<std::string, Joiner> joiners_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_JOINERS_H_
