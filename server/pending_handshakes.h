// Streams whose Hello has not arrived yet (docs/gossip.md "Threat model":
// nothing before the handshake). A stream we accepted can be opened by
// anyone who reaches the port; until its Hello is judged it may change
// nothing but its own life, and it may not live long or in numbers:
//  - an accepted stream that has said no Hello within `hello_timeout` is
//    closed (counted: hello_timeouts);
//  - at most `cap` streams wait for their Hello at once; one more closes the
//    oldest accepted one waiting (counted: handshakes_evicted). A member's
//    Hello comes one round trip after its stream opens, so a flood of
//    silent streams delays a member's handshake by at most a re-dial.
// Streams we dialed wait here too (a Refusal is believed only as the
// answer to our own Hello) but are never evicted or timed out here: the
// dial schedule (dial_schedule.h) gives each dial its deadline.
//
// Pure bookkeeping: the node calls it under its lock, with its clock, and
// closes the links it is handed. Not thread-safe.
#ifndef RECKON_SERVER_PENDING_HANDSHAKES_H_
#define RECKON_SERVER_PENDING_HANDSHAKES_H_

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "server/link.h"
#include "server/member.h"

namespace reckon::server {

class PendingHandshakes {
 public:
  struct Options {
    size_t cap = 64;
    Clock::duration hello_timeout = std::chrono::seconds(10);
  };
  explicit PendingHandshakes(Options options) : options_(options) {}

  // `link` opened at `now` and waits for its Hello. Returns the links to
  // close to stay within the cap (the oldest accepted ones, possibly `link`
  // itself when every waiting stream is one we dialed); they are no longer
  // held here. Adding a link held already changes nothing.
  std::vector<std::shared_ptr<Link>> Add(const std::shared_ptr<Link>& link, Clock::time_point now);
  bool Contains(const std::shared_ptr<Link>& link) const { return since_.count(link) > 0; }
  // The Hello arrived (or the link closed): no longer waiting. False when
  // it was not held.
  bool Remove(const std::shared_ptr<Link>& link) { return since_.erase(link) > 0; }
  // Accepted links opened more than hello_timeout before `now`, removed.
  std::vector<std::shared_ptr<Link>> TakeExpired(Clock::time_point now);
  std::vector<std::shared_ptr<Link>> All() const;
  size_t size() const { return since_.size(); }

 private:
  const Options options_;
  std::map<std::shared_ptr<Link>, Clock::time_point> since_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_PENDING_HANDSHAKES_H_
