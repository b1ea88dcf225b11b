// What the node tells about itself (the gossip service's Status call,
// /status, reckonctl status): its counters and status.
#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/node.h"

namespace reckon::server {
namespace {

double SecondsSince(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration<double>(now - t).count();
}

}  // namespace

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

void GossipNode::FillCounters(v1::NodeStatus* out) {
  *out->mutable_counters() = counters();
  out->set_checksum(core_.replica.ledger().total());
  out->set_last_check_ms(core_.handoff.last_check_ms());
  out->set_early_held(core_.early.size());
  out->set_early_bytes(core_.early.bytes());
  out->set_dial_targets(core_.membership.dials().targets());
  out->set_inbox_bytes(core_.inbox.bytes());
}

void GossipNode::FillStatus(v1::NodeStatus* out, bool with_weight_hash) {
  if (with_weight_hash) {
    // Computed on a copy, outside the lock: SHA-256 of the whole replica
    // must not stall the node thread (status is polled). Without a mirror:
    // the training replica's, where this node settled with it (empty while
    // it trains).
    std::vector<int64_t> weights;
    std::optional<std::string> hash;
    {
      absl::MutexLock l(&core_.mu);
      if (core_.replica.has_mirror()) {
        weights.assign(core_.replica.mirror().quanta().begin(),
                       core_.replica.mirror().quanta().end());
      } else {
        hash = core_.settlement.SettledAt(core_.replica.applied()) ? core_.settlement.hash() : "";
      }
    }
    out->set_weight_hash(hash ? *hash : codec::WeightHashOf(weights));
  }
  absl::MutexLock l(&core_.mu);
  const auto now = core_.Now();
  out->set_node_id(core_.self.node_id);
  out->set_incarnation(core_.self.incarnation);
  *out->mutable_fingerprint() = core_.options.fingerprint;
  out->set_local_steps(core_.handoff.local_steps());
  ToProto(core_.replica.applied(), out->mutable_applied());
  out->set_training_done(core_.handoff.done());
  out->set_joined(started_flag_.load());
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

}  // namespace reckon::server
