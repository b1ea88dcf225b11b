// The training thread's side of the gossip node (server/training_port.h).
#include "server/training_port.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "codec/codec.h"
#include "server/membership.h"

namespace reckon::server {

using Counters = NodeCore::Counters;

absl::Status TrainingPort::Publish(v1::Update message, const codec::DecodedUpdate& decoded) {
  // The frame that goes out, its checksum contribution and its signature
  // are made before the lock: the node thread does not wait on them.
  auto frame = std::make_shared<v1::GossipFrame>();
  *frame->mutable_update() = std::move(message);
  const v1::Update& update = frame->update();
  const uint64_t contribution = codec::ChecksumContribution(core_.checksum, decoded);
  frame->mutable_update()->set_checksum_delta(contribution);
  if (core_.signatures != nullptr) core_.signatures->Sign(frame->mutable_update());
  // The mirror adds it later, on the node thread: it keeps its own copy.
  std::shared_ptr<const codec::DecodedUpdate> for_mirror =
      core_.mirror ? std::make_shared<const codec::DecodedUpdate>(decoded) : nullptr;
  {
    absl::MutexLock l(&core_.mu);
    if (update.seq() != core_.last_published + 1) {
      return absl::InternalError(
          absl::StrCat("published seq ", update.seq(), " after ", core_.last_published));
    }
    if (absl::Status s = core_.state.Apply(core_.self, update.seq(), contribution, for_mirror);
        !s.ok()) {
      return s;
    }
    core_.last_published = update.seq();
    core_.log.Add(core_.self, frame, core_.Now());
    // Pushed by the node thread (PushPublished): a send may write to the
    // socket on the calling thread (gRPC's StartWrite on an idle stream,
    // about 60 us each), and the training thread is not to pay that once
    // per member every step, nor hold the node's lock meanwhile (8 members:
    // 0.5 ms of a 2.9 ms CPU step, `reckonctl bench inbound`).
    core_.to_push.push_back(frame);
    core_.changed.SignalAll();
  }
  core_.inbox.Wake();
  return absl::OkStatus();
}

Received TrainingPort::TakeReceived(bool with_cut) {
  absl::MutexLock l(&core_.mu);
  return TakeLocked(with_cut);
}

Received TrainingPort::TakeLocked(bool with_cut) {
  with_cut = with_cut || core_.handoff.weights_wanted();
  return core_.handoff.Take(
      core_.state.ledger().total(),
      with_cut ? std::optional<VersionMap>(core_.state.applied()) : std::nullopt);
}

void TrainingPort::OfferTrainingCut(VersionMap at, uint64_t checksum,
                                    std::vector<int64_t> weights) {
  auto cut = std::make_shared<TrainingCut>(
      TrainingCut{std::move(at), checksum, std::move(weights), Clock::now()});
  absl::MutexLock l(&core_.mu);
  core_.handoff.OfferWeights(std::move(cut));
}

void TrainingPort::RecordReplicaCheck(const VersionMap& at, uint64_t measured, uint64_t expected,
                                      double ms) {
  absl::MutexLock l(&core_.mu);
  core_.counters.Add(Counters::kReplicaChecksFieldNumber);
  core_.handoff.RecordCheck(at, measured, measured == expected, ms);
  if (measured == expected) return;
  core_.counters.Add(Counters::kReplicaCheckFailuresFieldNumber);
  core_.Log(absl::StrCat("REPLICA CHECK FAILED: the training replica's checksum is ",
                         codec::ChecksumHex(measured), " but the messages it applied give ",
                         codec::ChecksumHex(expected), " at ", VersionJson(at),
                         " (memory corruption, a faulty device, or a bug in apply)"));
}

std::optional<std::string> TrainingPort::RejoinSourceAfterFailedCheck() {
  absl::MutexLock l(&core_.mu);
  return core_.RejoinSourceLocked();
}

void TrainingPort::CountRejoinAfterFailedCheck() {
  absl::MutexLock l(&core_.mu);
  core_.counters.Add(Counters::kReplicaRejoinsFieldNumber);
}

uint64_t TrainingPort::MaxPeerLagLocked() {
  uint64_t lag = 0;
  for (const auto& [id, m] : core_.membership.table()) {
    if (m.state() != MemberState::kAlive) continue;
    lag = std::max(lag, core_.OwnMessagesBehindLocked(m));
  }
  return lag;
}

bool TrainingPort::WaitWhileLagging(uint64_t max_lag, Clock::time_point deadline) {
  absl::MutexLock l(&core_.mu);
  return WaitCountedLocked(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return MaxPeerLagLocked() > max_lag; },  // mu held
      deadline, Counters::kLagWaitMsFieldNumber);
}

bool TrainingPort::WaitCountedLocked(absl::FunctionRef<bool()> hold, Clock::time_point deadline,
                                     int counter_field) {
  const auto start = Clock::now();
  bool go_on = true;
  while (hold()) {
    if (Clock::now() >= deadline || core_.stopping) {
      go_on = false;
      break;
    }
    core_.changed.WaitWithTimeout(&core_.mu, absl::Milliseconds(20));
  }
  core_.counters.Add(
      counter_field,
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));
  return go_on;
}

size_t TrainingPort::OwnBacklogBytesLocked() {
  bool any_alive = false;
  uint64_t least = core_.last_published;
  for (const auto& [id, m] : core_.membership.table()) {
    if (m.state() != MemberState::kAlive) continue;
    any_alive = true;
    least = std::min(least, SeqOf(m.applied, core_.self));
  }
  const MessageLog::Entries* own = core_.log.Find(core_.self);
  if (!any_alive || own == nullptr) return 0;
  size_t bytes = 0;
  for (auto it = own->upper_bound(least); it != own->end(); ++it) bytes += it->second.bytes;
  return bytes;
}

size_t TrainingPort::MaxBacklogBytesLocked() {
  if (core_.options.max_backlog_bytes > 0) return core_.options.max_backlog_bytes;
  return core_.options.log_byte_cap / (2 * (core_.membership.table().CountAlive() + 1));
}

size_t TrainingPort::OwnBacklogBytes() {
  absl::MutexLock l(&core_.mu);
  return OwnBacklogBytesLocked();
}

bool TrainingPort::WaitWhileBacklogged(Clock::time_point deadline) {
  absl::MutexLock l(&core_.mu);
  return WaitCountedLocked(
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // mu held
        return OwnBacklogBytesLocked() > MaxBacklogBytesLocked();
      },
      deadline, Counters::kBackpressureMsFieldNumber);
}

void TrainingPort::SetTrainingDone(uint64_t local_steps) {
  absl::MutexLock l(&core_.mu);
  core_.handoff.SetDone(local_steps);
}

int TrainingPort::TrainingMembers() {
  absl::MutexLock l(&core_.mu);
  int members = core_.handoff.done() ? 0 : 1;
  for (const auto& [id, m] : core_.membership.table()) {
    if (m.state() == MemberState::kAlive && !m.training_done) ++members;
  }
  return members;
}

double TrainingPort::PeerRoundTripSteps() {
  absl::MutexLock l(&core_.mu);
  std::vector<double> round_trips;
  for (const auto& [id, m] : core_.membership.table()) {
    if (m.state() != MemberState::kAlive || m.lag_at_heartbeat < 0) continue;
    round_trips.push_back(std::clamp(m.lag_at_heartbeat - 1, 0.0, kMaxRoundTripSteps));
  }
  if (round_trips.empty()) return -1.0;
  // The median: a member that says it applies nothing of ours moves it no
  // further than the others let it.
  const auto middle = round_trips.begin() + static_cast<long>(round_trips.size() / 2);
  std::nth_element(round_trips.begin(), middle, round_trips.end());
  return *middle;
}

void TrainingPort::SetLocalSteps(uint64_t steps) {
  absl::MutexLock l(&core_.mu);
  core_.handoff.SetLocalSteps(steps);
}

absl::Status TrainingPort::WaitQuiescent(
    Clock::time_point deadline, const std::function<absl::Status(Received&)>& drain,
    const std::function<absl::StatusOr<std::string>()>& replica_hash) {
  std::string why;
  for (;;) {
    Received got;
    std::optional<VersionMap> hash_at;
    {
      absl::MutexLock l(&core_.mu);
      if (!core_.fatal.ok()) return core_.fatal;
      // Without a mirror, what the node needs of the training replica comes
      // first: a finished worker still serves snapshots, and settles only
      // with its replica's hash. Everything taken was applied (by `drain`,
      // before this turn), so with nothing pending the training replica is
      // at the node's vector.
      if (core_.handoff.hash_wanted() && !core_.handoff.pending() && replica_hash) {
        hash_at = core_.state.applied();
      } else if (!core_.handoff.weights_wanted() && core_.QuiescentLocked(&why)) {
        return absl::OkStatus();
      }
    }
    if (hash_at) {
      // SHA-256 of the whole replica, off the lock; only this thread takes
      // what the training replica applies, so it stays at `hash_at`.
      absl::StatusOr<std::string> hash = replica_hash();
      if (!hash.ok()) return hash.status();
      absl::MutexLock l(&core_.mu);
      core_.handoff.RecordHash(*std::move(hash_at), *std::move(hash));
      core_.UpdateSettled();
      continue;
    }
    {
      absl::MutexLock l(&core_.mu);
      got = TakeLocked(/*with_cut=*/false);
      if (!got.replace_weights && got.updates.empty() && !got.weights_wanted) {
        if (Clock::now() >= deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat("cluster not quiescent before the deadline: ", why));
        }
        core_.changed.WaitWithTimeout(&core_.mu, absl::Milliseconds(50));
        continue;
      }
    }
    absl::Status s = drain(got);
    if (!s.ok()) return s;
  }
}

std::optional<std::string> TrainingPort::RejoinSource() {
  absl::MutexLock l(&core_.mu);
  return core_.handoff.rejoin_source();
}

bool TrainingPort::RejoinFailed(const std::string& source, bool need_our_messages, bool refused) {
  absl::MutexLock l(&core_.mu);
  if (core_.handoff.rejoin_source() != source) return false;
  auto drop = [&](const std::string& why) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under core_.mu
    core_.counters.Add(Counters::kRejoinsIgnoredFieldNumber);
    core_.Log(absl::StrCat("re-join from ", source, " failed and ", why, ": not re-joining"));
    core_.rejoin_want.reset();
    core_.handoff.RejoinDone();
    return true;
  };
  std::optional<std::string> other;
  if (core_.rejoin_want) {
    // A refuser is not asked again in this re-join; one that did not answer
    // or lacked our messages may be, later.
    if (refused) core_.rejoin_want->refused.insert(source);
    std::set<std::string> avoid = core_.rejoin_want->refused;
    avoid.insert(source);
    other = core_.RejoinSourceFor(core_.rejoin_want->origin, core_.rejoin_want->first_retained,
                                  core_.rejoin_want->sender, avoid);
    if (!other) {
      if (refused) return drop("no other live member has what we lack");
      // No answer: asked again while it is a live member; once it is not,
      // nobody is left to ask.
      const std::vector<std::string> live = core_.membership.table().LiveAddresses("");
      const bool source_alive = std::find(live.begin(), live.end(), source) != live.end();
      return source_alive
                 ? false
                 : drop("it is no longer a live member, nor is another that has what we lack");
    }
  } else {
    other = core_.RejoinSourceLocked(source);
    if (!other || *other == source) return refused ? drop("no other member to ask") : false;
  }
  if (need_our_messages) {
    const uint64_t published = core_.last_published;  // lambdas are not seen to hold core_.mu
    const auto holder = std::find_if(core_.membership.table().begin(),
                                     core_.membership.table().end(), [&](const auto& entry) {
                                       return entry.second.address == *other &&
                                              SeqOf(entry.second.applied, core_.self) >= published;
                                     });
    if (holder == core_.membership.table().end()) return false;
  }
  core_.handoff.SwitchRejoin(*other);
  return true;
}

void TrainingPort::SetInputStandardization(v1::InputStandardization input) {
  absl::MutexLock l(&core_.mu);
  core_.input = std::move(input);
}

}  // namespace reckon::server
