// The state the gossip node's sides share, and the questions more than one of
// them asks of it under the lock (server/node_core.h).
#include "server/node_core.h"

#include <algorithm>
#include <iostream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "server/membership.h"

namespace reckon::server {

NodeCore::NodeCore(NodeOptions options_in, AppliedState state_in, bool clock_injected)
    : options(std::move(options_in)),
      self{options.node_id, options.incarnation},
      lanes{options.lanes, options.lane_min_bytes},
      signatures(options.signatures.get()),
      checksum(options.fingerprint.seed()),
      param_count(state_in.param_count()),
      mirror(state_in.mirror()),
      // An injected clock (a test's) is looked at every millisecond: a
      // test that moves it a heartbeat waits that long, not a heartbeat.
      inbox(
          options.inbox_byte_cap, options.clock,
          clock_injected ? Clock::duration(std::chrono::milliseconds(1)) : Clock::duration::max()),
      state(std::move(state_in)),
      early(options.early_arrival_cap, options.early_arrival_byte_cap),
      log(options.log_byte_cap, options.log_min_retention),
      membership(
          options, self, counters, [this](const std::string& line) { Log(line); }, Now()),
      heartbeats(HeartbeatWriter::Options{self, options.listen_address, options.member_list_every,
                                          options.failure_timeout, options.heartbeat_interval}) {}

void NodeCore::Log(const std::string& line) const {
  // One write per line: nodes sharing a process (the transport bench) do not
  // interleave within a line.
  const std::string whole = absl::StrCat("reckon-gossip[", options.node_id, "]: ", line, "\n");
  absl::MutexLock l(&log_mu_);
  std::cerr.write(whole.data(), static_cast<std::streamsize>(whole.size()));
  std::cerr.flush();
}

LocalQuiescence NodeCore::LocalQuiescenceLocked() {
  LocalQuiescence q;
  q.node_id = self.node_id;
  q.training_done = handoff.done();
  q.applying = handoff.pending();
  q.unreached = membership.SeedsUnreached();
  q.joining = membership.JoinersStillComing(Now());
  q.applied = state.applied();
  q.settled = settlement.settled();
  q.settled_at = settlement.at();
  q.settled_hash = settlement.hash();
  return q;
}

bool NodeCore::SettledLocked(std::string* why) {
  return Settled(LocalQuiescenceLocked(), membership.table().members(), why);
}

bool NodeCore::QuiescentLocked(std::string* why) {
  return Quiescent(LocalQuiescenceLocked(), membership.table().members(), why);
}

void NodeCore::UpdateSettled() {
  std::string why;
  // SHA-256 of the whole replica, on this thread: only when this node
  // settles at a new vector.
  settlement.Record(SettledLocked(&why), state.applied(),
                    [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // mu is held
                      return SettledHashLocked();
                    });
  if (settlement.settled()) {
    for (const auto& [id, m] : membership.table()) CheckSettledHash(m);
  }
}

void NodeCore::CheckSettledHash(const Member& m) {
  // Per heartbeat received: nothing to compare (and no state to copy) until
  // both sides have settled, i.e. during all of training.
  if (!fatal.ok() || !settlement.settled() || !m.settled) return;
  if (std::optional<std::string> line = Divergence(LocalQuiescenceLocked(), m)) {
    fatal = absl::DataLossError(*line);
    Log(*line);
  }
}

std::optional<std::string> NodeCore::SettledHashLocked() {
  if (mirror) {
    std::string hash;
    mirror->Read([&](const codec::FixedPointReplica& weights) { hash = weights.WeightHash(); });
    return hash;
  }
  if (std::optional<std::string> hash = handoff.HashAt(state.applied())) return hash;
  // Settled: the training thread is in WaitQuiescent, which hashes its
  // replica once it applied everything taken.
  if (!handoff.hash_wanted()) {
    handoff.WantHash();
    changed.SignalAll();
  }
  return std::nullopt;
}

uint64_t NodeCore::OwnMessagesBehindLocked(const Member& m) {
  const uint64_t theirs = SeqOf(m.applied, self);
  return last_published > theirs ? last_published - theirs : 0;
}

std::optional<std::string> NodeCore::RejoinSourceLocked(const std::string& avoid) {
  const Member* best = nullptr;
  const uint64_t published = last_published;  // lambdas are not seen to hold mu
  auto rank = [&](const Member& m) {
    uint64_t total = 0;
    for (const auto& [origin, seq] : m.applied) total += seq;
    return std::make_tuple(SeqOf(m.applied, self) >= published,
                           m.checks_diverged == 0 && m.checks_agreed > 0, total);
  };
  auto rank_avoiding = [&](const Member& m) { return std::make_pair(m.address != avoid, rank(m)); };
  for (const auto& [id, m] : membership.table()) {
    if (m.state() != MemberState::kAlive || m.address.empty()) continue;
    if (best == nullptr || rank_avoiding(m) > rank_avoiding(*best)) best = &m;
  }
  if (best == nullptr) return std::nullopt;
  return best->address;
}

std::optional<std::string> NodeCore::RejoinSourceFor(const OriginKey& origin,
                                                     uint64_t first_retained,
                                                     const std::string& sender,
                                                     const std::set<std::string>& avoid) {
  const Member* last_resort = nullptr;
  for (const auto& [id, m] : membership.table()) {
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

void NodeCore::CountMirrorReport(const Mirror::Report& report) {
  for (const Mirror::Wrapped& w : report.wrapped) {
    counters.Add(Counters::kWeightsWrappedFieldNumber, w.weights);
    // Only the node thread counts the mirror's wraps: the total read back
    // is this call's.
    const uint64_t total = counters.Get(Counters::kWeightsWrappedFieldNumber);
    if ((total - w.weights) / 1000 != total / 1000 ||
        total == w.weights) {  // a flood must not flood the log
      Log(absl::StrCat(w.origin.ToString().substr(0, 96), " seq ", w.seq, " took ", w.weights,
                       " weights past the int64 range: they wrapped (", total, " so far)"));
    }
  }
  for (const absl::Status& failed : report.failed) {
    // Validated against this model before it was accepted: not reached.
    // The replica check (docs/gossip.md "Divergence detection") then finds
    // the mirror wrong, and the node re-joins.
    counters.Add(Counters::kDecodeErrorsFieldNumber);
    Log(std::string(failed.message()));
  }
}

absl::Status NodeCore::CheckPeer(const v1::ClusterFingerprint& theirs, const std::string& token,
                                 const std::string& peer) const {
  const v1::ClusterFingerprint& ours = options.fingerprint;
  // Names both nodes, so the line reads the same in either one's log.
  auto differs = [&](const std::string& field, const auto& there, const auto& here) {
    return absl::FailedPreconditionError(absl::StrCat("cluster fingerprint mismatch: ", field,
                                                      " is ", there, " on '", peer.substr(0, 64),
                                                      "' but ", here, " on '", self.node_id, "'"));
  };
  if (theirs.protocol_version() != ours.protocol_version()) {
    return differs("protocol version", theirs.protocol_version(), ours.protocol_version());
  }
  if (theirs.model() != ours.model()) {
    // A framework's layout: the tensor that differs, by name.
    if (std::optional<std::string> tensor = DescribeModelDifference(theirs.model(), ours.model())) {
      return absl::FailedPreconditionError(
          absl::StrCat("cluster fingerprint mismatch: the model differs: ", *tensor, " (there: '",
                       peer.substr(0, 64), "', here: '", self.node_id, "')"));
    }
    return differs("model", theirs.model().substr(0, 96), ours.model());
  }
  if (theirs.param_count() != ours.param_count()) {
    return differs("param count", theirs.param_count(), ours.param_count());
  }
  if (theirs.fraction_bits() != ours.fraction_bits()) {
    return differs("fraction bits", theirs.fraction_bits(), ours.fraction_bits());
  }
  if (theirs.codec() != ours.codec()) {
    return differs("codec", v1::Codec_Name(theirs.codec()), v1::Codec_Name(ours.codec()));
  }
  if (theirs.seed() != ours.seed()) return differs("seed", theirs.seed(), ours.seed());
  if (theirs.overlay() != ours.overlay()) {
    return differs("overlay", v1::GossipOverlay_Name(theirs.overlay()),
                   v1::GossipOverlay_Name(ours.overlay()));
  }
  if (theirs.pretrain_samples() != ours.pretrain_samples()) {
    return differs("pretrain samples", theirs.pretrain_samples(), ours.pretrain_samples());
  }
  if (theirs.data() != ours.data()) {
    return differs("the training data", absl::StrCat("'", theirs.data().substr(0, 96), "'"),
                   absl::StrCat("'", ours.data(), "'"));
  }
  return CheckToken(token);
}

absl::Status NodeCore::CheckToken(const std::string& token) const {
  if (!options.cluster_token.empty() && !TokenMatches(token, options.cluster_token)) {
    return absl::PermissionDeniedError("cluster token does not match");
  }
  return absl::OkStatus();
}
}  // namespace reckon::server
