#include "server/quiescence.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace reckon::server {

const char* MemberStateName(MemberState state) {
  switch (state) {
    case MemberState::kConnecting:
      return "connecting";
    case MemberState::kAlive:
      return "alive";
    case MemberState::kDead:
      return "dead";
    case MemberState::kLeft:
      return "left";
  }
  return "unknown";
}

bool VersionsAgree(const Member& m, const VersionMap& ours) {
  if (m.refused_here.empty() && m.refused_there.empty()) return SameVersions(m.applied, ours);
  auto left_out = [&m](const OriginKey& origin) {
    return m.refused_here.count(origin) > 0 || m.refused_there.count(origin) > 0;
  };
  for (const auto& [origin, seq] : m.applied) {
    if (!left_out(origin) && SeqOf(ours, origin) != seq) return false;
  }
  for (const auto& [origin, seq] : ours) {
    if (!left_out(origin) && SeqOf(m.applied, origin) != seq) return false;
  }
  return true;
}

bool Settled(const LocalQuiescence& self, const MemberMap& members, std::string* why) {
  if (!self.training_done) {
    *why = "training";
    return false;
  }
  if (self.applying) {
    *why = "applying";
    return false;
  }
  if (self.unreached) {
    // Ending now would report a lone replica as the cluster's.
    *why = "never reached any member of the cluster";
    return false;
  }
  if (!self.joining.empty()) {
    // Ending now would leave its shard untrained and nobody to connect to.
    *why =
        absl::StrCat(absl::StrJoin(self.joining, ", "),
                     self.joining.size() == 1
                         ? " is joining (it asked for a snapshot and has not connected yet)"
                         : " are joining (they asked for a snapshot and have not connected yet)");
    return false;
  }
  for (const auto& [id, m] : members) {
    if (m.state() == MemberState::kConnecting) {
      *why = absl::StrCat("waiting to reach ", id);
      return false;
    }
    if (m.state() != MemberState::kAlive) continue;
    if (!m.training_done) {
      *why = absl::StrCat(id, " is still training");
      return false;
    }
    if (!VersionsAgree(m, self.applied)) {
      *why = absl::StrCat(id, " has another version vector: ", VersionJson(m.applied), " vs ours ",
                          VersionJson(self.applied));
      return false;
    }
  }
  return true;
}

bool Quiescent(const LocalQuiescence& self, const MemberMap& members, std::string* why) {
  if (!Settled(self, members, why)) return false;
  if (!self.settled || !SameVersions(self.settled_at, self.applied)) {
    *why = "settling (weight hash not yet taken at this vector)";
    return false;
  }
  int agreeing = 0;
  std::vector<std::string> dead;
  for (const auto& [id, m] : members) {
    // Nobody ever heard it (a name in a member list): not a member that
    // could be training on anywhere; it counts for nothing.
    if (m.state() == MemberState::kDead && !m.vouched) continue;
    if (m.state() == MemberState::kLeft) {
      // Left after saying it settled at our vector with our hash: it ended
      // here and agreed (it may well have seen our agreement before we saw
      // its). One that left otherwise is gone for good and counts for
      // nothing.
      if (m.settled && VersionsAgree(m, self.applied) &&
          m.weight_hash == self.settled_hash) {
        ++agreeing;
      }
      continue;
    }
    if (m.state() == MemberState::kDead) {
      // Gone silent after saying it settled at our vector with our hash: it
      // agreed, and with every member's training done it cannot have moved
      // on (its Leave was lost: a lossy link, a flush cut short).
      if (m.settled && VersionsAgree(m, self.applied) &&
          m.weight_hash == self.settled_hash) {
        ++agreeing;
      } else {
        dead.push_back(id);
      }
    }
    if (m.state() != MemberState::kAlive) continue;
    if (!m.settled || !VersionsAgree(m, self.applied)) {
      *why = absl::StrCat(id, " has not settled at our version vector");
      return false;
    }
    if (m.weight_hash != self.settled_hash) {
      *why = absl::StrCat(id, " has weights ", m.weight_hash, ", we have ", self.settled_hash);
      return false;
    }
    ++agreeing;
  }
  // A majority of the members that have not left (and of those that left
  // agreeing), this node included, must agree. Dead is not gone: a member
  // cut off by a partition looks dead and may be training on and ending on
  // its side. Two disjoint majorities cannot exist, so at most one side of
  // any partition ends; the other waits for the heal (or its quiesce
  // timeout, exit 1). A node alone among dead members (stopped, cut off)
  // never ends as if it agreed with them.
  const size_t counted = 1 + agreeing + dead.size();
  if (2 * (1 + static_cast<size_t>(agreeing)) <= counted) {
    *why = absl::StrCat("only ", 1 + agreeing, " of ", counted,
                        " members agree, not a majority (unreachable: ", absl::StrJoin(dead, ", "),
                        "): a partition may be training on");
    return false;
  }
  return true;
}

bool Settlement::Record(bool settled, const VersionMap& applied,
                        const std::function<std::optional<std::string>()>& hash) {
  const bool anew = settled && !SettledAt(applied);
  if (anew) {
    std::optional<std::string> taken = hash();
    if (!taken) {
      settled_ = false;
      return false;
    }
    hash_ = *std::move(taken);
    at_ = applied;
  }
  settled_ = settled;
  return anew;
}

std::optional<std::string> Divergence(const LocalQuiescence& self, const Member& m) {
  if (m.state() != MemberState::kAlive || !m.settled || !self.settled ||
      !SameVersions(self.settled_at, self.applied) || !VersionsAgree(m, self.applied) ||
      m.weight_hash == self.settled_hash) {
    return std::nullopt;
  }
  std::string line =
      absl::StrCat("replicas diverged: ", m.node_id, " has weights ", m.weight_hash, " but ",
                   self.node_id, " has ", self.settled_hash, " after applying the same messages ",
                   VersionJson(self.applied));
  if (!m.refused_here.empty() || !m.refused_there.empty()) {
    std::vector<std::string> named;
    for (const std::set<OriginKey>* refused : {&m.refused_here, &m.refused_there}) {
      for (const OriginKey& origin : *refused) {
        if (named.size() < 8) named.push_back(origin.ToString().substr(0, 96));
      }
    }
    absl::StrAppend(&line, " besides ", m.refused_here.size() + m.refused_there.size(),
                    " origins that one of the two refused past --max-origins (",
                    absl::StrJoin(named, ", "),
                    named.size() < m.refused_here.size() + m.refused_there.size() ? ", ..." : "",
                    "): a member invented more origins than the cap and showed each others");
  }
  return line;
}

}  // namespace reckon::server
