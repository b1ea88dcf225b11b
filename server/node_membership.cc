#include "server/node_membership.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/membership.h"

namespace reckon::server {

using Counters = v1::NodeCounters;

Membership::Membership(const NodeOptions& options, OriginKey self, NodeCounterSet& counters,
                       LogSink log, Clock::time_point now)
    : options_(options),
      self_(std::move(self)),
      tree_(options.fingerprint.overlay() == v1::GOSSIP_OVERLAY_TREE),
      counters_(counters),
      log_(std::move(log)),
      members_(MemberTable::Options{
          self_, options.max_members,
          PendingHandshakes::Options{options.max_pending_handshakes, options.hello_timeout}}),
      dial_(DialSchedule::Options{options.initial_backoff, options.max_backoff,
                                  2 * options.failure_timeout,
                                  // every member's address once, and the seeds
                                  options.max_members + options.seeds.size() + 1},
            options.incarnation),
      joiners_(options.max_members, options.failure_timeout),
      started_(now) {}

void Membership::Start(Dialer dialer, Clock::time_point now) {
  dialer_ = std::move(dialer);
  started_ = now;
  dial_.MarkSelf(options_.listen_address);
  for (const std::string& seed : options_.seeds) {
    dial_.Pin(seed);
    dial_.Learn(seed, started_);
  }
}

std::shared_ptr<Link> Membership::Dial(const std::string& address) const {
  return dialer_ ? dialer_(address) : nullptr;
}

void Membership::AwaitHello(const std::shared_ptr<Link>& link, Clock::time_point now) {
  for (const std::shared_ptr<Link>& evicted : members_.AwaitHello(link, now)) {
    counters_.Add(Counters::kHandshakesEvictedFieldNumber);
    log_(absl::StrCat("closing ", evicted->Describe(), ": no Hello yet, and ",
                      options_.max_pending_handshakes, " streams wait for theirs"));
    evicted->Abort();
  }
}

void Membership::CloseSilentStreams(Clock::time_point now) {
  for (const std::shared_ptr<Link>& silent : members_.TakeSilent(now)) {
    counters_.Add(Counters::kHelloTimeoutsFieldNumber);
    log_(absl::StrCat("closing ", silent->Describe(), ": no Hello within ",
                      options_.hello_timeout.count(), " ms"));
    silent->Abort();
  }
}

Member& Membership::Admit(const std::shared_ptr<Link>& link, const v1::Hello& hello,
                          Clock::time_point now) {
  const MemberTable::Admitted admitted = members_.Admit(link, hello, now);
  Member& m = *admitted.member;
  if (!admitted.gave_way.empty()) StopDialing(admitted.gave_way);
  if (admitted.restarted) {
    log_(absl::StrCat("peer ", m.node_id, " restarted as incarnation ", m.incarnation));
    if (m.links.connected()) DropLink(m);
  }
  // Before MoveMember, which may forget the address it was dialed at.
  dial_.Handshaken(link, m.node_id);
  handshaken_once_ = true;
  if (!hello.listen_address().empty()) MoveMember(m, hello.listen_address(), now);
  return m;
}

bool Membership::Connected(Member& m, Clock::time_point now) {
  const bool new_alive = members_.MarkAlive(m, now);
  m.vouched = true;
  RebuildRing();
  reached_any_ = true;
  return new_alive;
}

void Membership::DialedSelf(const std::shared_ptr<Link>& link) {
  dial_.DialedSelf(link);
  members_.StopAwaiting(link);
}

absl::Status Membership::RefusedByDialed(const std::shared_ptr<Link>& link,
                                         const std::string& why) {
  counters_.Add(Counters::kDialsRefusedFieldNumber);
  const std::string address = dial_.Refused(link);
  log_(absl::StrCat(why.substr(0, 300), ": not dialing ", address.empty() ? "it" : address,
                    " again"));
  if (handshaken_once_ || address.empty()) return absl::OkStatus();
  const bool seed =
      std::find(options_.seeds.begin(), options_.seeds.end(), address) != options_.seeds.end();
  if (!seed) return absl::OkStatus();
  seeds_refused_.insert(address);
  for (const std::string& s : options_.seeds) {
    if (!dial_.IsSelf(s) && !seeds_refused_.count(s)) return absl::OkStatus();  // another may
  }
  return absl::FailedPreconditionError(why);
}

void Membership::RefusedForNow(const std::shared_ptr<Link>& link, const OriginKey& refuser) {
  const Member* m = members_.Find(refuser.node_id);
  if (m != nullptr && m->incarnation == refuser.incarnation && m->links.connected()) {
    dial_.ReachedMember(link, m->node_id);
  }
}

void Membership::LinkClosed(const std::shared_ptr<Link>& link) {
  members_.StopAwaiting(link);
  dial_.Closed(link);
}

bool Membership::HeardAgain(Member& m, Clock::time_point now) {
  if (m.state() == MemberState::kAlive) return false;
  members_.MarkAlive(m, now);
  RebuildRing();
  return true;
}

void Membership::Left(Member& m) {
  members_.MarkLeft(m);
  DropLink(m);
  RebuildRing();
}

void Membership::DetectFailures(Clock::time_point now) {
  std::vector<std::string> names_gone;
  for (auto& [id, m] : members_) {
    std::optional<std::string> dead = SilentTooLong(m, now, options_.failure_timeout);
    if (!dead) continue;
    if (MemberTable::OnlyAName(m)) {
      // Never reached, heard by nobody: a name in a member list. It had
      // its failure timeout of dials; forgotten (a member list can name
      // anyone, and the table is capped).
      names_gone.push_back(id);
      continue;
    }
    log_(*dead);
    counters_.Add(Counters::kMembersFailedFieldNumber);
    members_.MarkDead(m);
    DropLink(m);
    RebuildRing();
  }
  for (const std::string& id : names_gone) StopDialing(members_.Forget(id));
  if (!names_gone.empty()) {
    counters_.Add(Counters::kNamesForgottenFieldNumber, names_gone.size());
  }
}

void Membership::DropLink(Member& m) {
  m.links.Drop();
  m.rejoin_told.clear();
}

void Membership::MoveMember(Member& m, const std::string& address, Clock::time_point now) {
  if (m.address == address) return;
  if (!m.address.empty()) {
    // Its old address is dialed no more (unless it is a seed): an old pod
    // IP would otherwise be redialed forever, and another process may
    // listen there by now.
    StopDialing(m.address);
  }
  m.address = address;
  if (!dial_.Learn(address, now)) {
    counters_.Add(Counters::kDialTargetsRefusedFieldNumber);
    log_(absl::StrCat("not dialing ", address.substr(0, 64), " for ", m.node_id, ": ",
                      dial_.targets(), " addresses known already"));
  }
}

std::vector<std::shared_ptr<Link>> Membership::DialDue(Clock::time_point now) {
  std::vector<std::shared_ptr<Link>> dialed;
  if (!dialer_) return dialed;
  for (DialSchedule::Expired& e : dial_.TakeExpired(now)) {
    // Every dial has a deadline (two failure timeouts: a handshake needs a
    // whole round trip, a heartbeat only half of one).
    log_(absl::StrCat("dial to ", e.address, " got no handshake in ",
                      absl::StrFormat("%.1f", std::chrono::duration<double>(e.waited).count()),
                      " s: abandoned, will dial again"));
    members_.StopAwaiting(e.link);
    e.link->Abort();
  }
  auto connected = [this](const std::string& address) {
    // A second address of a member (a seed given as its IP) as its own.
    return members_.ConnectedOrLeftAt(address, dial_.MemberAt(address));
  };
  for (const std::string& address : dial_.Due(now, connected)) {
    std::shared_ptr<Link> link = dialer_(address);
    if (!link) continue;
    dial_.Dialed(address, link, now);
    AwaitHello(link, now);
    dialed.push_back(std::move(link));
  }
  counters_.Set(Counters::kDialsDeferredFieldNumber, dial_.deferred());
  return dialed;
}

bool Membership::NoteJoiner(const std::string& node_id, uint64_t incarnation,
                            Clock::time_point now) {
  // Only ids a Hello could carry: they end up in logs, JSON and metric labels.
  if (!ValidNodeId(node_id) || node_id == self_.node_id) return false;
  const Joiners::Noted noted = joiners_.Note(node_id, incarnation, now);
  if (noted == Joiners::Noted::kFull) return false;
  if (noted == Joiners::Noted::kNew) {
    log_(absl::StrCat(node_id, " is joining (it asked for a snapshot)"));
  }
  return true;
}

bool Membership::SeedsUnreached() const {
  if (reached_any_) return false;
  for (const std::string& seed : options_.seeds) {
    if (!dial_.IsSelf(seed)) return true;
  }
  return false;
}

bool Membership::OriginAlive(const OriginKey& origin) const {
  return origin == self_ || members_.IsAlive(origin);
}

bool Membership::OriginMayBeAlive(const OriginKey& origin, Clock::time_point now) const {
  if (OriginAlive(origin)) return true;
  const Member* m = members_.Find(origin.node_id);
  if (m != nullptr && m->incarnation == origin.incarnation &&
      (m->state() == MemberState::kDead || m->state() == MemberState::kLeft)) {
    return false;  // reached, then silent past the failure timeout, or gone
  }
  if (m != nullptr && m->incarnation != origin.incarnation) return false;  // it restarted
  // Not reached (yet): given a failure timeout since we began, or since we
  // learned of its member, before it is presumed gone.
  const Clock::time_point since = m != nullptr ? std::max(started_, m->first_known) : started_;
  return now - since < options_.failure_timeout;
}

void Membership::StopDialing(const std::string& address) {
  if (address.empty()) return;
  if (std::shared_ptr<Link> pending = dial_.Forget(address)) {
    members_.StopAwaiting(pending);
    pending->Abort();
  }
}

void Membership::RebuildRing() {
  if (!tree_) return;
  std::vector<std::string> ids = {self_.node_id};
  for (std::string& id : members_.AliveIds()) ids.push_back(std::move(id));
  ring_ = Ring(std::move(ids));
}

}  // namespace reckon::server
