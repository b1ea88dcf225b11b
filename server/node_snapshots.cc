// One part of GossipNode's methods (server/node.h; docs/architecture.md "The
// gossip node in parts"). Snapshots and re-joins: cuts taken for the service, a
// snapshot installed (our own newer messages replayed on top), where to re-join
// from, the checksum a witness vouches for. Each runs on the thread and under
// the lock its declaration in node.h names.
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

void GossipNode::HandleRejoinRequired(const Member& from, const v1::RejoinRequired& rejoin) {
  const OriginKey origin = KeyOf(rejoin.origin());
  const uint64_t have = SeqOf(core_.state.applied(), origin);
  const uint64_t first = rejoin.first_retained_seq();
  if (have + 1 >= first || core_.handoff.rejoin_source()) return;  // nothing lacking, or re-joining
  // The caller holds core_.mu (lambdas are not seen to hold it).
  auto ignore = [&](const std::string& why) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    core_.counters.Add(Counters::kRejoinsIgnoredFieldNumber);
    if (core_.counters.Get(Counters::kRejoinsIgnoredFieldNumber) % 1000 ==
        1) {  // a flood must not flood the log
      core_.Log(absl::StrCat(
          from.node_id, " says its log no longer holds ", origin.ToString().substr(0, 96),
          " before seq ", first, " (we have ", have, "): not re-joining, ", why, " (",
          core_.counters.Get(Counters::kRejoinsIgnoredFieldNumber), " ignored so far)"));
    }
  };
  if (origin == core_.self) return ignore("that origin is this node, which has all of its own");
  if (core_.membership.table().IsAlive(origin) && origin.node_id != from.node_id) {
    return ignore("that origin is a live member and serves its own messages");
  }
  std::optional<std::string> source = core_.RejoinSourceFor(origin, first, from.node_id, {});
  if (!source) return ignore("no live member has applied it that far");
  core_.Log(absl::StrCat("fell out of ", from.node_id, "'s log for ", origin.ToString(),
                         " (we have ", have, ", it keeps from ", first,
                         "): re-joining from a snapshot of ", *source));
  core_.rejoin_want = NodeCore::RejoinWant{origin, first, from.node_id, {}};
  core_.handoff.AskRejoin(*source);
}

absl::Status GossipNode::InstallSnapshot(std::span<const int64_t> weights,
                                         const VersionMap& applied, uint64_t checksum,
                                         const std::string& source) {
  // Measured before the lock: O(param_count).
  const uint64_t measured = core_.checksum.Of(weights);
  absl::MutexLock l(&core_.mu);
  if (measured != checksum) {
    core_.counters.Add(Counters::kDivergencesFieldNumber);
    return absl::DataLossError(absl::StrCat("the snapshot from ", source, " has checksum ",
                                            codec::ChecksumHex(measured), " but its messages give ",
                                            codec::ChecksumHex(checksum), ": not installed"));
  }
  // What can refuse the snapshot is checked before the mirror changes, so
  // that a refused one leaves mirror, ledger and versions as they were.
  if (const uint64_t own = OwnMessagesBeyond(applied); own < core_.last_published) {
    return absl::FailedPreconditionError(absl::StrCat("the snapshot from ", source,
                                                      " lacks our own messages after seq ", own,
                                                      " and our log no longer holds them"));
  }
  // All or nothing: the log's messages beyond the cut (our own above all:
  // the snapshot's source may not have them yet) are replayed onto it
  // (without a mirror: by the training thread, after the weights).
  std::vector<std::shared_ptr<const codec::DecodedUpdate>> replayed;
  if (absl::Status s = core_.state.Install(weights, applied, checksum, core_.log,
                                           core_.state.has_mirror() ? nullptr : &replayed);
      !s.ok()) {
    return s;
  }
  if (core_.mirror) {
    core_.handoff.ReplaceWeights(core_.mirror->CopyWeights());
  } else {
    core_.handoff.ReplaceWeights(std::vector<int64_t>(weights.begin(), weights.end()));
    const auto now = Clock::now();
    for (auto& decoded : replayed) core_.handoff.Queue(std::move(decoded), now);
  }
  core_.handoff.DropCut();  // of the replica this one replaces
  core_.rejoin_want.reset();
  for (const OriginKey& origin : core_.early.Origins()) {
    core_.early.SetOriginApplied(origin, core_.state.applied().count(origin) > 0);
    AcceptWaiting(origin);
  }
  for (auto& [id, m] : core_.membership.table()) {
    m.links.state().ForgetPushed();
  }
  core_.handoff.RejoinDone();
  core_.counters.Add(Counters::kSnapshotsLoadedFieldNumber);
  // The replica no longer rests on our initial weights (whatever the
  // cluster's were, we cannot vouch for them now).
  core_.initial_sha256.clear();
  core_.Log(
      absl::StrCat("installed a snapshot from ", source, ": ", VersionJson(core_.state.applied())));
  core_.changed.SignalAll();
  return absl::OkStatus();
}

uint64_t GossipNode::OwnMessagesBeyond(const VersionMap& applied) const {
  uint64_t seq = SeqOf(applied, core_.self);
  const auto own = core_.log.origins().find(core_.self);
  if (own == core_.log.origins().end()) return seq;
  for (auto it = own->second.find(seq + 1); it != own->second.end() && it->first == seq + 1; ++it) {
    ++seq;
  }
  return seq;
}

}  // namespace reckon::server
