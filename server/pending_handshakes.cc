#include "server/pending_handshakes.h"

namespace reckon::server {

std::vector<std::shared_ptr<Link>> PendingHandshakes::Add(const std::shared_ptr<Link>& link,
                                                          Clock::time_point now) {
  std::vector<std::shared_ptr<Link>> evicted;
  if (Contains(link)) return evicted;
  since_.emplace(link, now);
  while (since_.size() > options_.cap) {
    auto oldest = since_.end();
    for (auto it = since_.begin(); it != since_.end(); ++it) {
      if (it->first->dialed()) continue;
      if (oldest == since_.end() || it->second < oldest->second) oldest = it;
    }
    if (oldest == since_.end()) break;  // only dials of ours: their deadline bounds them
    evicted.push_back(oldest->first);
    since_.erase(oldest);
  }
  return evicted;
}

std::vector<std::shared_ptr<Link>> PendingHandshakes::TakeExpired(Clock::time_point now) {
  std::vector<std::shared_ptr<Link>> expired;
  for (auto it = since_.begin(); it != since_.end();) {
    if (!it->first->dialed() && now - it->second > options_.hello_timeout) {
      expired.push_back(it->first);
      it = since_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

std::vector<std::shared_ptr<Link>> PendingHandshakes::All() const {
  std::vector<std::shared_ptr<Link>> all;
  all.reserve(since_.size());
  for (const auto& [link, since] : since_) all.push_back(link);
  return all;
}

}  // namespace reckon::server
