#include "server/joiners.h"

namespace reckon::server {

Joiners::Noted Joiners::Note(const std::string& node_id, uint64_t incarnation,
                             Clock::time_point now) {
  auto it = joiners_.find(node_id);
  Noted noted = Noted::kAgain;
  if (it == joiners_.end()) {
    if (joiners_.size() >= cap_) return Noted::kFull;
    it = joiners_.emplace(node_id, Joiner{}).first;
    noted = Noted::kNew;
  }
  it->second.incarnation = incarnation;
  it->second.last_request = now;
  return noted;
}

std::vector<std::string> Joiners::StillComing(const MemberMap& members, Clock::time_point now) {
  std::vector<std::string> coming;
  for (auto it = joiners_.begin(); it != joiners_.end();) {
    auto m = members.find(it->first);
    const bool arrived = m != members.end() && m->second.incarnation == it->second.incarnation &&
                         m->second.state() != MemberState::kConnecting;
    if (arrived || now - it->second.last_request > patience_) {
      it = joiners_.erase(it);
    } else {
      coming.push_back(it->first);
      ++it;
    }
  }
  return coming;
}

}  // namespace reckon::server
