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

std::optional<uint64_t> GossipNode::ChecksumAt(const VersionMap& at) {
  absl::MutexLock l(&mu_);
  return replica_.ledger().At(at);
}

std::optional<std::string> GossipNode::ResyncSource() {
  absl::MutexLock l(&mu_);
  return handoff_.resync_source();
}

void GossipNode::HandleResyncRequired(const Member& from, const v1::ResyncRequired& resync) {
  const OriginKey origin = KeyOf(resync.origin());
  const uint64_t have = SeqOf(replica_.applied(), origin);
  const uint64_t first = resync.first_retained_seq();
  if (have + 1 >= first || handoff_.resync_source()) return;  // nothing lacking, or re-joining
  // The caller holds mu_ (lambdas are not seen to hold it).
  auto ignore = [&](const std::string& why) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    counters_.Add(Counters::kResyncsIgnoredFieldNumber);
    if (counters_.Get(Counters::kResyncsIgnoredFieldNumber) % 1000 ==
        1) {  // a flood must not flood the log
      Log(absl::StrCat(from.node_id, " says its log no longer holds ",
                       origin.ToString().substr(0, 96), " before seq ", first, " (we have ", have,
                       "): not re-joining, ", why, " (",
                       counters_.Get(Counters::kResyncsIgnoredFieldNumber), " ignored so far)"));
    }
  };
  if (origin == self_) return ignore("that origin is this node, which has all of its own");
  if (membership_.table().IsAlive(origin) && origin.node_id != from.node_id) {
    return ignore("that origin is a live member and serves its own messages");
  }
  std::optional<std::string> source = ResyncSourceFor(origin, first, from.node_id, {});
  if (!source) return ignore("no live member has applied it that far");
  Log(absl::StrCat("fell out of ", from.node_id, "'s log for ", origin.ToString(), " (we have ",
                   have, ", it keeps from ", first, "): re-joining from a snapshot of ", *source));
  resync_want_ = ResyncWant{origin, first, from.node_id, {}};
  handoff_.AskResync(*source);
}

std::optional<std::string> GossipNode::ResyncSourceFor(const OriginKey& origin,
                                                       uint64_t first_retained,
                                                       const std::string& sender,
                                                       const std::set<std::string>& avoid) {
  const Member* last_resort = nullptr;
  for (const auto& [id, m] : membership_.table()) {
    if (m.state() != MemberState::kAlive || m.address.empty() || avoid.count(m.address)) continue;
    const bool has_it = SeqOf(m.applied, origin) + 1 >= first_retained ||
                        (origin.node_id == id && origin.incarnation == m.incarnation);
    if (!has_it) continue;
    if (id != sender) return m.address;
    last_resort = &m;
  }
  if (last_resort == nullptr) return std::nullopt;
  return last_resort->address;
}

bool GossipNode::ResyncFailed(const std::string& source, bool need_our_messages, bool refused) {
  absl::MutexLock l(&mu_);
  if (handoff_.resync_source() != source) return false;
  auto drop = [&](const std::string& why) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mu_
    counters_.Add(Counters::kResyncsIgnoredFieldNumber);
    Log(absl::StrCat("re-join from ", source, " failed and ", why, ": not re-joining"));
    resync_want_.reset();
    handoff_.ResyncDone();
    return true;
  };
  std::optional<std::string> other;
  if (resync_want_) {
    // A refuser is not asked again in this re-join; one that did not answer
    // or lacked our messages may be, later.
    if (refused) resync_want_->refused.insert(source);
    std::set<std::string> avoid = resync_want_->refused;
    avoid.insert(source);
    other = ResyncSourceFor(resync_want_->origin, resync_want_->first_retained,
                            resync_want_->sender, avoid);
    if (!other) {
      if (refused) return drop("no other live member has what we lack");
      // No answer: asked again while it is a live member; once it is not,
      // nobody is left to ask.
      const std::vector<std::string> live = membership_.table().LiveAddresses("");
      const bool source_alive = std::find(live.begin(), live.end(), source) != live.end();
      return source_alive ? false : drop("it is no longer a live member, nor is another that has what we lack");
    }
  } else {
    other = RepairSourceLocked(source);
    if (!other || *other == source) return refused ? drop("no other member to ask") : false;
  }
  if (need_our_messages) {
    const uint64_t published = last_published_;  // lambdas are not seen to hold mu_
    const auto holder = std::find_if(
        membership_.table().begin(), membership_.table().end(), [&](const auto& entry) {
          return entry.second.address == *other && SeqOf(entry.second.applied, self_) >= published;
        });
    if (holder == membership_.table().end()) return false;
  }
  handoff_.SwitchResync(*other);
  return true;
}

absl::Status GossipNode::InstallSnapshot(std::span<const int64_t> weights,
                                         const VersionMap& applied, uint64_t checksum,
                                         const std::string& source) {
  // Measured before the lock: O(param_count).
  const uint64_t measured = checksum_.Of(weights);
  absl::MutexLock l(&mu_);
  if (measured != checksum) {
    counters_.Add(Counters::kDivergencesFieldNumber);
    return absl::DataLossError(absl::StrCat("the snapshot from ", source, " has checksum ",
                                            codec::ChecksumHex(measured), " but its messages give ",
                                            codec::ChecksumHex(checksum), ": not installed"));
  }
  // What can refuse the snapshot is checked before the mirror changes, so
  // that a refused one leaves mirror, ledger and versions as they were.
  if (const uint64_t own = OwnMessagesBeyond(applied); own < last_published_) {
    return absl::FailedPreconditionError(absl::StrCat("the snapshot from ", source,
                                                      " lacks our own messages after seq ", own,
                                                      " and our log no longer holds them"));
  }
  // All or nothing: the log's messages beyond the cut (our own above all:
  // the snapshot's source may not have them yet) are replayed onto it
  // (without a mirror: by the training thread, after the weights).
  std::vector<std::shared_ptr<const codec::DecodedUpdate>> replayed;
  if (absl::Status s = replica_.Install(weights, applied, checksum, log_,
                                        replica_.has_mirror() ? nullptr : &replayed);
      !s.ok()) {
    return s;
  }
  if (replica_.has_mirror()) {
    handoff_.ReplaceWeights(
        std::vector<int64_t>(replica_.mirror().quanta().begin(), replica_.mirror().quanta().end()));
  } else {
    handoff_.ReplaceWeights(std::vector<int64_t>(weights.begin(), weights.end()));
    const auto now = Clock::now();
    for (auto& decoded : replayed) handoff_.Queue(std::move(decoded), now);
  }
  handoff_.DropCut();  // of the replica this one replaces
  resync_want_.reset();
  for (const OriginKey& origin : early_.Origins()) {
    early_.SetOriginApplied(origin, replica_.applied().count(origin) > 0);
    AcceptWaiting(origin);
  }
  for (auto& [id, m] : membership_.table()) {
    m.links.state().ForgetPushed();
  }
  handoff_.ResyncDone();
  counters_.Add(Counters::kSnapshotsLoadedFieldNumber);
  // The replica no longer rests on our initial weights (whatever the
  // cluster's were, we cannot vouch for them now).
  initial_sha256_.clear();
  Log(absl::StrCat("installed a snapshot from ", source, ": ", VersionJson(replica_.applied())));
  changed_.SignalAll();
  return absl::OkStatus();
}

uint64_t GossipNode::OwnMessagesBeyond(const VersionMap& applied) const {
  uint64_t seq = SeqOf(applied, self_);
  const auto own = log_.origins().find(self_);
  if (own == log_.origins().end()) return seq;
  for (auto it = own->second.find(seq + 1); it != own->second.end() && it->first == seq + 1; ++it) {
    ++seq;
  }
  return seq;
}

GossipNode::Snapshot GossipNode::TakeSnapshot(bool with_weights, Clock::time_point asked_at) {
  std::shared_ptr<const TrainingCut> cut;
  {
    absl::MutexLock l(&mu_);
    if (!with_weights || replica_.has_mirror()) {
      Snapshot out{replica_.applied(), replica_.ledger().total(), {}};
      if (with_weights)
        out.weights.assign(replica_.mirror().quanta().begin(), replica_.mirror().quanta().end());
      return out;
    }
    cut = handoff_.CutSince(asked_at);
    if (cut == nullptr) {
      // The training thread cuts its replica at its next step boundary
      // (TakeReceived), or in WaitQuiescent once it finished.
      handoff_.WantWeights();
      changed_.SignalAll();
      Snapshot pending;
      pending.pending = true;
      return pending;
    }
  }
  // Copied outside the lock: the cut is immutable, and shared by every
  // snapshot asked for before it was made.
  return Snapshot{cut->at, cut->checksum, cut->weights};
}

bool GossipNode::CheckSnapshotServed(const Snapshot& snapshot, uint64_t measured) {
  if (measured == snapshot.checksum) return true;
  absl::MutexLock l(&mu_);
  counters_.Add(Counters::kReplicaCheckFailuresFieldNumber);
  Log(absl::StrCat("REPLICA CHECK FAILED: this node's replica has checksum ",
                   codec::ChecksumHex(measured), " but its messages give ",
                   codec::ChecksumHex(snapshot.checksum), " at ", VersionJson(snapshot.applied),
                   ": snapshot refused; re-joining from a peer"));
  if (!handoff_.resync_source()) {
    if (std::optional<std::string> source = RepairSourceLocked()) {
      resync_want_.reset();  // a repair: any member will do
      handoff_.AskResync(*source);
    }
  }
  return false;
}

NodeService::Replay GossipNode::ReplayOf(const VersionMap& applied, uint64_t limit) {
  absl::MutexLock l(&mu_);
  Replay replay;
  replay.initial_sha256 = initial_sha256_;
  if (initial_sha256_.empty()) return replay;
  // Every message of the cut from seq 1, without a gap; bounded by `limit`
  // (a log of Strom's messages holds millions: a probe stops early).
  uint64_t bytes = 0;
  for (const auto& [origin, seq] : applied) {
    if (seq == 0) continue;
    const MessageLog::Entries* held = log_.Find(origin);
    if (held == nullptr || held->empty() || held->begin()->first != 1) return replay;
    uint64_t expected = 1;
    for (auto it = held->begin(); it != held->end() && it->first <= seq; ++it, ++expected) {
      if (it->first != expected) return replay;
      bytes += it->second.bytes;
      if (bytes >= limit) return replay;
    }
    if (expected != seq + 1) return replay;
  }
  replay.bytes = bytes;
  return replay;
}

}  // namespace reckon::server
