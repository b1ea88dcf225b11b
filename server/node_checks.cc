// One part of GossipNode's methods (server/node.h; docs/architecture.md "The
// gossip node in parts"). The training thread's side: replica checks and
// divergence, lag and backlog (backpressure), training done, quiescence in two
// phases. Each runs on the thread and under the lock its declaration in node.h
// names.
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

void GossipNode::RecordReplicaCheck(const VersionMap& at, uint64_t measured, uint64_t expected,
                                    double ms) {
  absl::MutexLock l(&mu_);
  counters_.Add(Counters::kReplicaChecksFieldNumber);
  handoff_.RecordCheck(at, measured, measured == expected, ms);
  if (measured == expected) return;
  counters_.Add(Counters::kReplicaCheckFailuresFieldNumber);
  Log(absl::StrCat("REPLICA CHECK FAILED: the training replica's checksum is ",
                   codec::ChecksumHex(measured), " but the messages it applied give ",
                   codec::ChecksumHex(expected), " at ", VersionJson(at),
                   " (memory corruption, a faulty device, or a bug in apply)"));
}

std::optional<std::string> GossipNode::RepairSourceLocked(const std::string& avoid) {
  const Member* best = nullptr;
  const uint64_t published = last_published_;  // lambdas are not seen to hold mu_
  auto rank = [&](const Member& m) {
    uint64_t total = 0;
    for (const auto& [origin, seq] : m.applied) total += seq;
    return std::make_tuple(SeqOf(m.applied, self_) >= published,
                           m.checks_diverged == 0 && m.checks_agreed > 0, total);
  };
  auto rank_avoiding = [&](const Member& m) { return std::make_pair(m.address != avoid, rank(m)); };
  for (const auto& [id, m] : membership_.table()) {
    if (m.state() != MemberState::kAlive || m.address.empty()) continue;
    if (best == nullptr || rank_avoiding(m) > rank_avoiding(*best)) best = &m;
  }
  if (best == nullptr) return std::nullopt;
  return best->address;
}

std::optional<std::string> GossipNode::RepairSource() {
  absl::MutexLock l(&mu_);
  return RepairSourceLocked();
}

void GossipNode::CountReplicaRepair() {
  absl::MutexLock l(&mu_);
  counters_.Add(Counters::kReplicaRepairsFieldNumber);
}

void GossipNode::ComparePeerCheck(Member& m) {
  if (!m.pending_check || !replica_.ledger().Passed(m.pending_check->at)) return;  // not there yet
  const Member::Check check = *std::move(m.pending_check);
  m.pending_check.reset();
  const std::optional<uint64_t> ours = replica_.ledger().At(check.at);
  if (!ours) return;  // behind the history we keep (or our snapshot's cut): not comparable
  if (*ours == check.checksum) {
    ++m.checks_agreed;
    counters_.Add(Counters::kPeerChecksAgreedFieldNumber);
    return;
  }
  ++m.checks_diverged;
  counters_.Add(Counters::kDivergencesFieldNumber);
  Log(absl::StrCat("DIVERGENCE: ", m.node_id, "'s replica checked ",
                   codec::ChecksumHex(check.checksum), " at ", VersionJson(check.at),
                   " but the messages this node applied give ", codec::ChecksumHex(*ours),
                   " there: the two applied different messages under the same ids"));
}

uint64_t GossipNode::MaxPeerLagLocked() {
  uint64_t lag = 0;
  for (const auto& [id, m] : membership_.table()) {
    if (m.state() != MemberState::kAlive) continue;
    const uint64_t theirs = SeqOf(m.applied, self_);
    if (last_published_ > theirs) lag = std::max(lag, last_published_ - theirs);
  }
  return lag;
}

bool GossipNode::WaitWhileLagging(uint64_t max_lag, Clock::time_point deadline) {
  absl::MutexLock l(&mu_);
  while (MaxPeerLagLocked() > max_lag) {
    const auto now = Clock::now();
    if (now >= deadline || stopping_) return false;
    changed_.WaitWithTimeout(&mu_, absl::Milliseconds(20));
  }
  return true;
}

size_t GossipNode::OwnBacklogBytesLocked() {
  bool any_alive = false;
  uint64_t least = last_published_;
  for (const auto& [id, m] : membership_.table()) {
    if (m.state() != MemberState::kAlive) continue;
    any_alive = true;
    least = std::min(least, SeqOf(m.applied, self_));
  }
  const MessageLog::Entries* own = log_.Find(self_);
  if (!any_alive || own == nullptr) return 0;
  size_t bytes = 0;
  for (auto it = own->upper_bound(least); it != own->end(); ++it) bytes += it->second.bytes;
  return bytes;
}

size_t GossipNode::MaxBacklogBytesLocked() {
  if (options_.max_backlog_bytes > 0) return options_.max_backlog_bytes;
  return options_.log_byte_cap / (2 * (membership_.table().CountAlive() + 1));
}

size_t GossipNode::OwnBacklogBytes() {
  absl::MutexLock l(&mu_);
  return OwnBacklogBytesLocked();
}

bool GossipNode::WaitWhileBacklogged(Clock::time_point deadline) {
  absl::MutexLock l(&mu_);
  const auto start = Clock::now();
  bool go_on = true;
  while (OwnBacklogBytesLocked() > MaxBacklogBytesLocked()) {
    if (Clock::now() >= deadline || stopping_) {
      go_on = false;
      break;
    }
    changed_.WaitWithTimeout(&mu_, absl::Milliseconds(20));
  }
  counters_.Add(
      Counters::kBackpressureMsFieldNumber,
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));
  return go_on;
}

void GossipNode::SetTrainingDone(uint64_t local_steps) {
  absl::MutexLock l(&mu_);
  handoff_.SetDone(local_steps);
}

int GossipNode::TrainingMembers() {
  absl::MutexLock l(&mu_);
  int members = handoff_.done() ? 0 : 1;
  for (const auto& [id, m] : membership_.table()) {
    if (m.state() == MemberState::kAlive && !m.training_done) ++members;
  }
  return members;
}

void GossipNode::SetLocalSteps(uint64_t steps) {
  absl::MutexLock l(&mu_);
  handoff_.SetLocalSteps(steps);
}

LocalQuiescence GossipNode::LocalQuiescenceLocked() {
  LocalQuiescence q;
  q.node_id = self_.node_id;
  q.training_done = handoff_.done();
  q.applying = handoff_.pending();
  q.unreached = membership_.SeedsUnreached();
  q.joining = membership_.JoinersStillComing(Now());
  q.applied = replica_.applied();
  q.settled = settlement_.settled();
  q.settled_at = settlement_.at();
  q.settled_hash = settlement_.hash();
  return q;
}

bool GossipNode::SettledLocked(std::string* why) {
  return Settled(LocalQuiescenceLocked(), membership_.table().members(), why);
}

void GossipNode::UpdateSettled() {
  std::string why;
  // SHA-256 of the whole replica, on this thread: only when this node
  // settles at a new vector.
  settlement_.Record(SettledLocked(&why), replica_.applied(),
                     [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // mu_ is held
                       return SettledHashLocked();
                     });
  if (settlement_.settled()) {
    for (const auto& [id, m] : membership_.table()) CheckSettledHash(m);
  }
}

std::optional<std::string> GossipNode::SettledHashLocked() {
  if (replica_.has_mirror()) return replica_.mirror().WeightHash();
  if (std::optional<std::string> hash = handoff_.HashAt(replica_.applied())) return hash;
  // Settled: the training thread is in WaitQuiescent, which hashes its
  // replica once it applied everything taken.
  if (!handoff_.hash_wanted()) {
    handoff_.WantHash();
    changed_.SignalAll();
  }
  return std::nullopt;
}

void GossipNode::CheckSettledHash(const Member& m) {
  // Per heartbeat received: nothing to compare (and no state to copy) until
  // both sides have settled, i.e. during all of training.
  if (!fatal_.ok() || !settlement_.settled() || !m.settled) return;
  if (std::optional<std::string> line = Divergence(LocalQuiescenceLocked(), m)) {
    fatal_ = absl::DataLossError(*line);
    Log(*line);
  }
}

bool GossipNode::QuiescentLocked(std::string* why) {
  return Quiescent(LocalQuiescenceLocked(), membership_.table().members(), why);
}

absl::Status GossipNode::WaitQuiescent(
    Clock::time_point deadline, const std::function<absl::Status(Received&)>& drain,
    const std::function<absl::StatusOr<std::string>()>& replica_hash) {
  std::string why;
  for (;;) {
    Received got;
    std::optional<VersionMap> hash_at;
    {
      absl::MutexLock l(&mu_);
      if (!fatal_.ok()) return fatal_;
      // Without a mirror, what the node needs of the training replica comes
      // first: a finished worker still serves snapshots, and settles only
      // with its replica's hash. Everything taken was applied (by `drain`,
      // before this turn), so with nothing pending the training replica is
      // at the node's vector.
      if (handoff_.hash_wanted() && !handoff_.pending() && replica_hash) {
        hash_at = replica_.applied();
      } else if (!handoff_.weights_wanted() && QuiescentLocked(&why)) {
        return absl::OkStatus();
      }
    }
    if (hash_at) {
      // SHA-256 of the whole replica, off the lock; only this thread takes
      // what the training replica applies, so it stays at `hash_at`.
      absl::StatusOr<std::string> hash = replica_hash();
      if (!hash.ok()) return hash.status();
      absl::MutexLock l(&mu_);
      handoff_.RecordHash(*std::move(hash_at), *std::move(hash));
      UpdateSettled();
      continue;
    }
    {
      absl::MutexLock l(&mu_);
      got = TakeLocked(/*with_cut=*/false);
      if (!got.replace_weights && got.updates.empty() && !got.weights_wanted) {
        if (Clock::now() >= deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat("cluster not quiescent before the deadline: ", why));
        }
        changed_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
        continue;
      }
    }
    absl::Status s = drain(got);
    if (!s.ok()) return s;
  }
}

}  // namespace reckon::server
