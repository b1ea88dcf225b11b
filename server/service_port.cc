// The service's side of the gossip node (server/service_port.h), and the
// status as JSON.
#include "server/service_port.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "server/membership.h"

namespace reckon::server {
namespace {

double SecondsSince(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration<double>(now - t).count();
}

}  // namespace

using Counters = NodeCore::Counters;

std::string NodeStatusJson(const v1::NodeStatus& status) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  // Printing a message we built cannot fail; an empty object if it ever did.
  if (!google::protobuf::util::MessageToJsonString(status, &json, options).ok()) return "{}\n";
  return json;
}

ServicePort::ServicePort(NodeCore& core)
    : NodeService(core.options.fingerprint, core.options.node_id,
                  core.options.max_origins + core.options.max_members + 1),
      core_(core) {}

absl::Status ServicePort::CheckPeer(const v1::ClusterFingerprint& theirs, const std::string& token,
                                    const std::string& peer) const {
  return core_.CheckPeer(theirs, token, peer);
}

absl::Status ServicePort::CheckToken(const std::string& token) const {
  return core_.CheckToken(token);
}

void ServicePort::Log(const std::string& line) { core_.Log(line); }

std::string ServicePort::InitialSha256() {
  absl::MutexLock l(&core_.mu);
  return core_.initial_sha256;
}

void ServicePort::NoteJoiner(const std::string& node_id, uint64_t incarnation) {
  absl::MutexLock l(&core_.mu);
  if (core_.membership.NoteJoiner(node_id, incarnation, core_.Now())) core_.changed.SignalAll();
}

void ServicePort::OnLinkUp(const std::shared_ptr<Link>& link) { core_.inbox.PushUp(link); }

bool ServicePort::OnFrame(const std::shared_ptr<Link>& link, v1::GossipFrame frame) {
  return core_.inbox.PushFrame(link, std::move(frame));
}

size_t ServicePort::InboxBytes() { return core_.inbox.bytes(); }

void ServicePort::OnLinkClosed(const std::shared_ptr<Link>& link, const std::string& why) {
  core_.inbox.PushClosed(link, why);
}

void ServicePort::FillCounters(v1::NodeStatus* out) {
  *out->mutable_counters() = counters();
  out->set_checksum(core_.state.ledger().total());
  out->set_last_check_ms(core_.handoff.last_check_ms());
  out->set_early_held(core_.early.size());
  out->set_early_bytes(core_.early.bytes());
  out->set_dial_targets(core_.membership.dials().targets());
  out->set_inbox_bytes(core_.inbox.bytes());
}

void ServicePort::FillStatus(v1::NodeStatus* out, bool with_weight_hash) {
  if (with_weight_hash) out->set_weight_hash(ReplicaHash());
  absl::MutexLock l(&core_.mu);
  const auto now = core_.Now();
  out->set_node_id(core_.self.node_id);
  out->set_incarnation(core_.self.incarnation);
  *out->mutable_fingerprint() = core_.options.fingerprint;
  out->set_local_steps(core_.handoff.local_steps());
  ToProto(core_.state.applied(), out->mutable_applied());
  out->set_training_done(core_.handoff.done());
  out->set_joined(core_.started.load());
  FillCounters(out);
  out->set_log_bytes(core_.log.bytes());
  out->set_log_messages(core_.log.messages());
  std::string why;
  out->set_quiescent(core_.QuiescentLocked(&why));  // also drops joiners that arrived or expired
  for (const auto& [id, j] : core_.membership.joiners().all()) {
    if (core_.membership.table().IsCurrent(OriginKey{id, j.incarnation})) continue;
    v1::MemberStatus* ms = out->add_members();
    ms->set_node_id(id);
    ms->set_incarnation(j.incarnation);
    ms->set_state("joining");
    ms->set_last_heard_s(SecondsSince(j.last_request, now));
  }
  for (const auto& [id, m] : core_.membership.table()) {
    v1::MemberStatus* ms = out->add_members();
    ms->set_node_id(id);
    ms->set_incarnation(m.incarnation);
    ms->set_address(m.address);
    ms->set_state(MemberStateName(m.state()));
    ms->set_lag(static_cast<int64_t>(core_.last_published) -
                static_cast<int64_t>(SeqOf(m.applied, core_.self)));
    ms->set_training_done(m.training_done);
    ms->set_last_heard_s(m.state() == MemberState::kConnecting ? -1
                                                               : SecondsSince(m.last_heard, now));
    ms->set_checks_agreed(m.checks_agreed);
    ms->set_checks_diverged(m.checks_diverged);
    ms->set_lanes_out(m.links.lanes_up());
    ms->set_lanes_in(m.links.lanes_in());
    ms->set_queued_bytes(m.links.QueuedBytes());
  }
}

uint64_t ServicePort::MessagesBehind() {
  absl::MutexLock l(&core_.mu);
  uint64_t most = 0;
  for (const auto& [id, m] : core_.membership.table()) {
    if (m.state() != MemberState::kAlive) continue;
    uint64_t behind = 0;
    for (const auto& [origin, seq] : m.applied) {
      const uint64_t ours = SeqOf(core_.state.applied(), origin);
      if (seq > ours) behind += seq - ours;
    }
    most = std::max(most, behind);
  }
  return most;
}

std::chrono::milliseconds ServicePort::LoopAge() const {
  const Clock::time_point last{Clock::duration(core_.last_loop_ns.load())};
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last);
}

std::optional<uint64_t> ServicePort::TicksForTesting() const {
  absl::MutexLock l(&core_.mu);
  if (core_.stopping) return std::nullopt;
  return core_.heartbeats.ticks();
}

std::optional<uint64_t> ServicePort::IdleForTesting() { return core_.inbox.IdleForTesting(); }

ServicePort::Snapshot ServicePort::TakeSnapshot(bool with_weights, Clock::time_point asked_at) {
  std::shared_ptr<const TrainingCut> cut;
  {
    absl::MutexLock l(&core_.mu);
    if (!with_weights || core_.mirror) {
      Snapshot out{core_.state.applied(), core_.state.ledger().total(), {}};
      if (with_weights) out.weights = core_.mirror->CopyWeights();
      return out;
    }
    cut = core_.handoff.CutSince(asked_at);
    if (cut == nullptr) {
      // The training thread cuts its replica at its next step boundary
      // (TakeReceived), or in WaitQuiescent once it finished.
      core_.handoff.WantWeights();
      core_.changed.SignalAll();
      Snapshot pending;
      pending.pending = true;
      return pending;
    }
  }
  // Copied outside the lock: the cut is immutable, and shared by every
  // snapshot asked for before it was made.
  return Snapshot{cut->at, cut->checksum, cut->weights};
}

bool ServicePort::CheckSnapshotServed(const Snapshot& snapshot, uint64_t measured) {
  if (measured == snapshot.checksum) return true;
  absl::MutexLock l(&core_.mu);
  core_.counters.Add(Counters::kReplicaCheckFailuresFieldNumber);
  core_.Log(absl::StrCat(
      "REPLICA CHECK FAILED: this node's replica has checksum ", codec::ChecksumHex(measured),
      " but its messages give ", codec::ChecksumHex(snapshot.checksum), " at ",
      VersionJson(snapshot.applied), ": snapshot refused; re-joining from a peer"));
  if (!core_.handoff.rejoin_source()) {
    if (std::optional<std::string> source = core_.RejoinSourceLocked()) {
      core_.rejoin_want.reset();  // after a failed check: any member will do
      core_.handoff.AskRejoin(*source);
    }
  }
  return false;
}

std::optional<uint64_t> ServicePort::ChecksumAt(const VersionMap& at) {
  absl::MutexLock l(&core_.mu);
  return core_.state.ledger().At(at);
}

std::vector<std::string> ServicePort::LiveMemberAddresses(const std::string& except) {
  absl::MutexLock l(&core_.mu);
  return core_.membership.table().LiveAddresses(except);
}

VersionMap ServicePort::Applied() {
  absl::MutexLock l(&core_.mu);
  return core_.state.applied();
}

NodeService::Replay ServicePort::ReplayOf(const VersionMap& applied, uint64_t limit) {
  absl::MutexLock l(&core_.mu);
  Replay replay;
  replay.initial_sha256 = core_.initial_sha256;
  if (core_.initial_sha256.empty()) return replay;
  // Every message of the cut from seq 1, without a gap; bounded by `limit`
  // (a log of Strom's messages holds millions: a probe stops early).
  uint64_t bytes = 0;
  for (const auto& [origin, seq] : applied) {
    if (seq == 0) continue;
    const MessageLog::Entries* held = core_.log.Find(origin);
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

v1::InputStandardization ServicePort::InputStandardization() {
  absl::MutexLock l(&core_.mu);
  return core_.input;
}

std::string ServicePort::ReplicaHash() {
  // Computed on a copy, outside the lock: SHA-256 of the whole replica must
  // not stall the node thread (status is polled). Without a mirror: the
  // training replica's, where this node settled with it (empty while it
  // trains).
  std::vector<int64_t> weights;
  {
    absl::MutexLock l(&core_.mu);
    if (!core_.mirror) {
      return core_.settlement.SettledAt(core_.state.applied()) ? core_.settlement.hash() : "";
    }
    weights = core_.mirror->CopyWeights();
  }
  return codec::WeightHashOf(weights);
}

ServicePort::Counters ServicePort::counters() {
  Counters c = core_.counters.Snapshot();
  c.set_inbox_pauses(core_.inbox.pauses());
  return c;
}

void ServicePort::Count(int field_number, uint64_t n) { core_.counters.Add(field_number, n); }

}  // namespace reckon::server
