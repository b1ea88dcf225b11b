// One part of GossipNode's methods (server/node.h; docs/architecture.md "The
// gossip node in parts"). Heartbeats and anti-entropy: what each heartbeat
// reports (heartbeat_writer.h writes it), what a member's says about what it
// lacks, and what we send it again; a member's replica check it announced,
// compared with our ledger. Each runs on the thread and
// under the lock its declaration in node.h names.
#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "codec/codec.h"
#include "server/anti_entropy.h"
#include "server/lanes.h"
#include "server/membership.h"
#include "server/node.h"

namespace reckon::server {

void GossipNode::HandleHeartbeat(Member& m, const v1::Heartbeat& hb, Clock::time_point now) {
  // Refused whole before anything of it is taken: no member's vector names
  // more origins than ours may (a map per member of what a frame can list
  // would be memory nobody counts), as sent or as its changes make it.
  const size_t bound = service_.max_vector_origins();
  absl::Status bounded = CheckOrigins(hb.applied(), bound);
  if (bounded.ok()) bounded = CheckOrigins(hb.checked(), bound);
  if (bounded.ok() && static_cast<size_t>(hb.refused_origins_size()) > bound) {
    bounded = absl::InvalidArgumentError(
        absl::StrCat("it names ", hb.refused_origins_size(), " refused origins, past the ", bound,
                     " a vector may name (--max-origins, plus the members)"));
  }
  if (bounded.ok() && hb.applied_changes_only()) {
    size_t adds = 0;
    for (const v1::VersionEntry& e : hb.applied().entries()) {
      if (!m.applied.count(KeyOf(e.origin()))) ++adds;
    }
    if (m.applied.size() + adds > bound) {
      bounded = absl::InvalidArgumentError(
          absl::StrCat("its changes name ", adds, " new origins, past the ", bound,
                       " a vector may name (--max-origins, plus the members)"));
    }
  }
  if (!bounded.ok()) {
    core_.counters.Add(Counters::kFramesRefusedFieldNumber);
    if (core_.counters.Get(Counters::kFramesRefusedFieldNumber) % 1000 ==
        1) {  // a flood must not flood the log
      core_.Log(absl::StrCat("refused a heartbeat from ", m.node_id, ": ", bounded.message(), " (",
                             core_.counters.Get(Counters::kFramesRefusedFieldNumber),
                             " frames refused so far)"));
    }
    return;
  }
  if (hb.applied_changes_only()) {
    // Its vector's changes since its previous heartbeat on this stream.
    for (const v1::VersionEntry& e : hb.applied().entries()) m.applied[KeyOf(e.origin())] = e.seq();
  } else {
    m.applied = FromProto(hb.applied());
  }
  // Read as the heartbeat lands, not later: the lag between two heartbeats
  // would grow with their interval (MaxPeerLagLocked's does). Only once it
  // applied one of ours: before that, what it lacks is not yet in flight.
  if (SeqOf(m.applied, core_.self) > 0) {
    const auto lag = static_cast<double>(core_.OwnMessagesBehindLocked(m));
    m.lag_at_heartbeat =
        m.lag_at_heartbeat < 0 ? lag : m.lag_at_heartbeat + 0.2 * (lag - m.lag_at_heartbeat);
  }
  LearnRefusedOrigins(m, hb);
  m.training_done = hb.training_done();
  m.settled = hb.settled();
  m.weight_hash = hb.weight_hash().substr(0, 64);
  core_.CheckSettledHash(m);
  if (hb.has_checked()) {
    m.pending_check = Member::Check{FromProto(hb.checked()), hb.checked_checksum()};
    ComparePeerCheck(m);
  }
  // Lost on this stream: it processed the frame that carried what we pushed
  // and still lacks some of it. Serve again from what it has.
  m.links.ForgetLost(m.applied, hb.frames_received(), hb.lane_frames_received());
  ListLearned learned = core_.membership.table().Learn(m, hb.members(), now);
  core_.counters.Add(Counters::kMembersRefusedFieldNumber, learned.refused);
  for (const LearnedAddress& l : learned.addresses) {
    if (l.new_member) {
      core_.Log(absl::StrCat("learned of peer ", l.member->node_id, " at ", l.address.substr(0, 64),
                             " from ", m.node_id));
    }
    core_.membership.MoveMember(*l.member, l.address, now);
  }
  AntiEntropy(m, now);
}

void GossipNode::LearnRefusedOrigins(Member& m, const v1::Heartbeat& hb) {
  const size_t before = m.refused_here.size() + m.refused_there.size();
  // Origins it applied that we refuse: it cannot be that we ever apply
  // them, so our replicas differ by them for good (the weights say how).
  // Only what this heartbeat names: a walk of the changes, not the vector.
  for (const v1::VersionEntry& e : hb.applied().entries()) {
    if (e.seq() == 0) continue;
    const OriginKey origin = KeyOf(e.origin());
    if (core_.state.applied().count(origin) > 0 || !RefusesNewOrigin(origin)) continue;
    if (m.refused_here.insert(origin).second) m.refused_untold.push_back(origin);
  }
  // Ours that it refuses (only those we have: the set stays within our
  // vector).
  for (const v1::Origin& o : hb.refused_origins()) {
    const OriginKey origin = KeyOf(o);
    if (core_.state.applied().count(origin) > 0) m.refused_there.insert(origin);
  }
  const size_t found = m.refused_here.size() + m.refused_there.size() - before;
  if (found == 0) return;
  core_.counters.Add(Counters::kOriginsDivergedFieldNumber, found);
  if (before == 0) {
    core_.Log(absl::StrCat(
        "origins past --max-origins (", core_.options.max_origins, "): ", m.node_id, " applied ",
        m.refused_here.size(), " that this node refuses and refuses ", m.refused_there.size(),
        " that it applied; neither sends the other those, and the ending compares "
        "the rest (the weight hashes say whether the replicas differ)"));
  }
}

void GossipNode::AntiEntropy(Member& m, Clock::time_point now) {
  if (!m.links.connected() || m.state() != MemberState::kAlive) return;
  // Every origin we applied, not only those our log still holds: a member
  // behind on one whose messages all left the log (it was dead when they
  // did) must be told to re-join, or it would never catch up. That is every
  // origin, each tick and heartbeat, for every member: a walk of the sorted
  // vectors side by side, and nothing more for what it has (a member with
  // the token can make them thousands of origins long).
  static const MessageLog::Entries kNothingRetained;
  SeqCursor theirs_at(m.applied), pushed_at(m.links.state().pushed);
  for (const auto& [origin, ours] : core_.state.applied()) {
    const uint64_t theirs = theirs_at.At(origin), pushed = pushed_at.At(origin);
    if (std::max(theirs, pushed) >= ours) continue;  // PlanRepair's kNothing
    if (m.Refuses(origin)) continue;  // it said it never takes them
    const MessageLog::Entries* retained = core_.log.Find(origin);
    const MessageLog::Entries& entries = retained != nullptr ? *retained : kNothingRetained;
    const RepairPlan plan =
        PlanRepair(ours, theirs, pushed, entries.empty() ? ours + 1 : entries.begin()->first,
                   m.rejoin_told.count(origin) > 0);
    if (plan.kind == RepairPlan::kRejoin) {
      // A live origin that m hears serves m itself (its own log decides
      // whether m must re-join): from us, a joiner whose cut is later than
      // m's, it would be a spurious snapshot. So does one m may still be
      // reaching: within a failure timeout of its coming, its heartbeats
      // may not say yet whom it hears (the relay rule waits as long). An
      // origin we have not reached yet may be as alive (OriginMayBeAlive).
      const bool may_hear =
          m.hears.count(origin) > 0 || now - m.alive_since() < core_.options.failure_timeout;
      if (origin != core_.self && core_.membership.OriginMayBeAlive(origin, now) && may_hear)
        continue;
      auto frame = std::make_shared<v1::GossipFrame>();
      frame->mutable_rejoin()->mutable_origin()->set_node_id(origin.node_id);
      frame->mutable_rejoin()->mutable_origin()->set_incarnation(origin.incarnation);
      frame->mutable_rejoin()->set_first_retained_seq(plan.first);
      outbound::SendTo(core_, m, frame, SIZE_MAX);
      m.rejoin_told.insert(origin);
      continue;
    }
    if (plan.kind != RepairPlan::kSend) continue;
    // (Our own count as alive; the relay rules do not ask for them.)
    const bool origin_alive = core_.membership.OriginAlive(origin);
    const bool member_hears_origin = m.hears.count(origin) > 0;
    const bool tree_child =
        core_.membership.tree() && origin_alive &&
        core_.membership.ring().IsChild(origin.node_id, core_.self.node_id, m.node_id);
    for (auto it = entries.find(plan.first); it != entries.end() && it->first <= plan.last; ++it) {
      if (m.links.LeastQueued() > core_.options.send_queue_byte_cap / 2) return;
      const Clock::duration age = now - it->second.added, heard_for = now - m.alive_since();
      const bool may =
          core_.membership.tree()
              ? MayRelayInTree(tree_child, origin == core_.self, origin_alive, member_hears_origin,
                               age, heard_for, core_.options.repair_timeout,
                               core_.options.failure_timeout)
              : MayRelay(origin == core_.self, origin_alive, member_hears_origin, age, heard_for,
                         core_.options.repair_timeout, core_.options.failure_timeout);
      if (!may) break;
      const bool resend = it->first <= SeqOf(m.ever_sent, origin);
      if (!outbound::SendUpdate(core_, m, origin, it->first, it->second.frame)) break;
      core_.counters.Add(Counters::kRepairsSentFieldNumber);
      if (resend) core_.counters.Add(Counters::kRepairsResentFieldNumber);
    }
  }
}

HeartbeatWriter::Bases GossipNode::MakeHeartbeats(bool tick) {
  // What every heartbeat says besides the vector.
  v1::Heartbeat said;
  said.set_local_steps(core_.handoff.local_steps());
  said.set_training_done(core_.handoff.done());
  if (core_.settlement.SettledAt(core_.state.applied())) {
    said.set_settled(true);
    said.set_weight_hash(core_.settlement.hash());
  }
  if (std::optional<Member::Check> check = core_.handoff.TakeCheckToAnnounce()) {
    ToProto(check->at, said.mutable_checked());
    said.set_checked_checksum(check->checksum);
  }
  return core_.heartbeats.Make(said, core_.state.applied(), tick);
}

bool GossipNode::SendHeartbeat(Member& m, const HeartbeatWriter::Bases& bases, size_t byte_cap) {
  if (!outbound::SendTo(core_, m, core_.heartbeats.For(m, bases, core_.membership.table()),
                        byte_cap))
    return false;
  core_.heartbeats.Sent(m);
  return true;
}

void GossipNode::ComparePeerCheck(Member& m) {
  if (!m.pending_check || !core_.state.ledger().Passed(m.pending_check->at))
    return;  // not there yet
  const Member::Check check = *std::move(m.pending_check);
  m.pending_check.reset();
  const std::optional<uint64_t> ours = core_.state.ledger().At(check.at);
  if (!ours) return;  // behind the history we keep (or our snapshot's cut): not comparable
  if (*ours == check.checksum) {
    ++m.checks_agreed;
    core_.counters.Add(Counters::kPeerChecksAgreedFieldNumber);
    return;
  }
  ++m.checks_diverged;
  core_.counters.Add(Counters::kDivergencesFieldNumber);
  core_.Log(absl::StrCat("DIVERGENCE: ", m.node_id, "'s replica checked ",
                         codec::ChecksumHex(check.checksum), " at ", VersionJson(check.at),
                         " but the messages this node applied give ", codec::ChecksumHex(*ours),
                         " there: the two applied different messages under the same ids"));
}

}  // namespace reckon::server
