#include "server/membership.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "codec/sha256.h"
#include "server/node.h"

namespace reckon::server {

bool TokenMatches(const std::string& given, const std::string& token) {
  // Digests of equal length compared in constant time: how long the
  // comparison takes tells nothing of the token.
  const codec::Sha256Digest a = codec::Sha256Of(given), b = codec::Sha256Of(token);
  volatile uint8_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ = differ | uint8_t(a[i] ^ b[i]);
  return differ == 0;
}

std::optional<std::string> DescribeModelDifference(const std::string& theirs,
                                                   const std::string& ours) {
  auto quote = [](absl::string_view s) { return absl::StrCat("'", s.substr(0, 64), "'"); };
  if (!absl::StrContains(theirs, ':') || !absl::StrContains(ours, ':')) return std::nullopt;
  const std::vector<absl::string_view> a = absl::StrSplit(theirs, ';');
  const std::vector<absl::string_view> b = absl::StrSplit(ours, ';');
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size() && i < b.size() && a[i] == b[i]) continue;
    if (i >= a.size()) return absl::StrCat("tensor ", i, " ", quote(b[i]), " only here");
    if (i >= b.size()) return absl::StrCat("tensor ", i, " ", quote(a[i]), " only there");
    return absl::StrCat("tensor ", i, " is ", quote(a[i]), " there but ", quote(b[i]), " here");
  }
  return absl::StrCat(quote(theirs), " there but ", quote(ours), " here");
}

namespace {

// A Hello in the name of a member this node knows. Without TLS anyone with
// the token can speak in a member's name. While the member's stream is up
// and it was heard within the failure timeout, its process is not gone, and
// a claim waits (a refusal, not permanent):
//  - another incarnation (older or newer) is a restart only once the old
//    stream closes or falls silent; an incarnation that took the id while
//    the member was away (an impostor, or a process thought dead) keeps it
//    only while it is alive itself, so it cannot lock the real one out for
//    good;
//  - another stream of the same incarnation is a dial race only when the
//    two go opposite ways and the first is new (both ends dialed at once;
//    the node keeps one, KeepsStream); otherwise it is an impostor or a
//    reconnection the member's old stream has not seen end yet, let in once
//    it does.
std::optional<HelloVerdict> ClaimOnAMemberAliveHere(const Member& m, const v1::Hello& hello,
                                                    const HelloContext& c) {
  const bool alive_here = m.state() == MemberState::kAlive && m.links.stream() != nullptr &&
                          c.now - m.last_heard <= c.failure_timeout;
  if (!alive_here) return std::nullopt;
  const std::string& id = hello.self().node_id();
  const auto heard_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(c.now - m.last_heard).count();
  if (hello.self().incarnation() != m.incarnation) {
    return HelloVerdict{HelloVerdict::kRefuse,
                        absl::StrCat("node '", id, "' incarnation ", m.incarnation,
                                     " is alive here (heard ", heard_ms, " ms ago): incarnation ",
                                     hello.self().incarnation(), " is let in once it is gone"),
                        false, v1::NodeCounters::kPeersRefusedForNowFieldNumber};
  }
  const bool dial_race = m.links.stream()->dialed() != c.link_dialed &&
                         c.now - m.links.state().attached <= c.failure_timeout;
  if (dial_race) return std::nullopt;
  return HelloVerdict{HelloVerdict::kRefuse,
                      absl::StrCat("node '", id, "' incarnation ", m.incarnation,
                                   " is alive here on another stream (heard ", heard_ms,
                                   " ms ago): a second stream is let in once that one is gone"),
                      false, v1::NodeCounters::kPeersRefusedForNowFieldNumber};
}

}  // namespace

HelloVerdict JudgeHello(const v1::Hello& hello, const HelloContext& c) {
  const std::string& id = hello.self().node_id();
  auto refuse = [](std::string reason, bool permanent) {
    return HelloVerdict{HelloVerdict::kRefuse, std::move(reason), permanent};
  };
  if (!ValidNodeId(id)) {
    return refuse(absl::StrCat("node id '", id.substr(0, 64), "' is not valid"), true);
  }
  if (!c.fingerprint_and_token.ok()) {
    return refuse(std::string(c.fingerprint_and_token.message()), true);
  }
  if (c.require_identity && c.peer_identity != id) {
    // A member of the CA speaking for another: its certificate says who it is.
    return refuse(absl::StrCat("node id '", id, "' is not the identity of its certificate ('",
                               c.peer_identity.substr(0, 64), "')"),
                  true);
  }
  if (id != c.self.node_id && hello.listen_address().empty()) {
    // Every member must be dialable by every other: a member known to one
    // node only would be invisible to the others' quiescence.
    return refuse(absl::StrCat("node '", id,
                               "' sent no listen_address: every member must be reachable by "
                               "every other"),
                  true);
  }
  if (hello.listen_address().size() > 255) {
    return refuse("listen_address is longer than 255 bytes", true);
  }
  if (id == c.self.node_id) {
    if (hello.self().incarnation() == c.self.incarnation)
      return {HelloVerdict::kSelfDial, "", false};
    return refuse(absl::StrCat("node id '", id, "' is this node's (incarnation ",
                               c.self.incarnation, "); every worker needs its own --node-id"),
                  true);
  }
  auto known = c.members->find(id);
  if (known == c.members->end() && c.members->size() >= c.max_members &&
      !c.a_name_can_give_way) {
    HelloVerdict v = refuse(
        absl::StrCat("this cluster already has ", c.max_members, " members besides this node"),
        false);
    v.counter = v1::NodeCounters::kMembersRefusedFieldNumber;
    return v;
  }
  if (known != c.members->end() && known->second.state() == MemberState::kLeft &&
      known->second.incarnation == hello.self().incarnation()) {
    // Its Leave came first; this is a dial it had in flight (on another
    // connection, so it may arrive after the Leave). Let in, it would make
    // a member that is gone alive again, then dead.
    HelloVerdict v = refuse(absl::StrCat("node '", id, "' incarnation ", hello.self().incarnation(),
                                         " left the cluster: a restart joins as a new incarnation"),
                            false);
    v.counter = v1::NodeCounters::kPeersRefusedForNowFieldNumber;
    return v;
  }
  if (known != c.members->end() && hello.lane() == 0) {
    if (std::optional<HelloVerdict> wait = ClaimOnAMemberAliveHere(known->second, hello, c)) {
      return *wait;
    }
  }
  return {};
}

bool KeepsStream(const std::string& self_id, const std::string& peer_id, bool dialed) {
  return dialed == (self_id < peer_id);
}

std::optional<std::string> SilentTooLong(const Member& m, Clock::time_point now,
                                         Clock::duration failure_timeout) {
  if (m.state() != MemberState::kAlive && m.state() != MemberState::kConnecting)
    return std::nullopt;
  const bool alive = m.state() == MemberState::kAlive;
  const Clock::time_point since = alive ? m.last_heard : m.first_known;
  if (now - since <= failure_timeout) return std::nullopt;
  return absl::StrCat("peer ", m.node_id, alive ? " missed heartbeats for " : " not reached in ",
                      absl::StrFormat("%.1f", std::chrono::duration<double>(now - since).count()),
                      " s: marked dead");
}

ListLearned LearnMemberList(Member& from,
                            const google::protobuf::RepeatedPtrField<v1::Member>& list,
                            const std::string& self_id, size_t max_members, Clock::time_point now,
                            MemberMap* members, const std::set<std::string>* forgotten) {
  ListLearned out;
  if (list.empty()) return out;
  from.hears.clear();
  for (const v1::Member& other : list) {
    const std::string& id = other.node_id();
    if (id == self_id || !ValidNodeId(id) || other.address().empty() ||
        other.address().size() > 255) {
      continue;
    }
    if (other.heard() && from.hears.size() < max_members) {
      from.hears.insert(OriginKey{id, other.incarnation()});
    }
    if (!members->count(id) && !other.heard() && forgotten != nullptr && forgotten->count(id)) {
      continue;
    }
    if (!members->count(id) && members->size() >= max_members) {
      ++out.refused;
      continue;
    }
    Member& known = (*members)[id];
    if (known.node_id.empty()) {
      known.node_id = id;
      known.first_known = now;
      out.addresses.push_back({&known, other.address(), true});
    } else if (known.incarnation == 0 && !known.links.connected() && other.heard()) {
      // Never reached: where a member that hears it now says it is (a
      // restarted pod has a new IP; a member that does not hear it may
      // know an old one, and two such lists must not flip the address
      // back and forth). A member we reached said where it listens in its
      // own Hello: what others say of it does not change that.
      out.addresses.push_back({&known, other.address(), false});
    }
    if (other.heard()) known.vouched = true;
  }
  return out;
}

}  // namespace reckon::server
