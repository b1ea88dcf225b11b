#include "server/node_metrics.h"

#include <map>

namespace reckon::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// Builds families; every sample gets the node label.
class Families {
 public:
  explicit Families(std::string node) : node_(std::move(node)) {}

  void Counter(const std::string& name, const std::string& help, double value, Labels labels = {}) {
    Sample(name, help, MetricType::Counter, value, std::move(labels));
  }
  void Gauge(const std::string& name, const std::string& help, double value, Labels labels = {}) {
    Sample(name, help, MetricType::Gauge, value, std::move(labels));
  }
  // A family with no sample yet (a gauge per peer, and no peer): listed all
  // the same, so the exposition always names it.
  void Declare(const std::string& name, const std::string& help, MetricType type) {
    Family(name, help, type);
  }
  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  MetricFamily& Family(const std::string& name, const std::string& help, MetricType type) {
    auto it = index_.find(name);
    if (it != index_.end()) return families_[it->second];
    index_[name] = families_.size();
    families_.push_back({name, help, type, {}});
    return families_.back();
  }
  void Sample(const std::string& name, const std::string& help, MetricType type, double value,
              Labels labels) {
    ClientMetric m;
    m.label.push_back({"node", node_});
    for (auto& l : labels) m.label.push_back(std::move(l));
    if (type == MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    Family(name, help, type).metric.push_back(std::move(m));
  }

  std::string node_;
  std::vector<MetricFamily> families_;
  std::map<std::string, size_t> index_;
};

// What the limits of docs/gossip.md "Threat model" turned away.
void AddLimitCounters(const GossipNode::Counters& c, Families& f) {
  f.Counter("reckon_hello_timeouts_total",
            "Accepted gossip streams closed because no Hello came within the hello timeout",
            double(c.hello_timeouts));
  f.Counter("reckon_handshakes_evicted_total",
            "Accepted gossip streams closed before their Hello: too many waited for theirs",
            double(c.handshakes_evicted));
  f.Counter("reckon_dial_targets_refused_total",
            "Addresses announced that were not dialed: as many as the member cap allows known",
            double(c.dial_targets_refused));
  f.Counter("reckon_origins_refused_total",
            "Updates of a new origin dropped: the version vector holds the most origins allowed",
            double(c.origins_refused));
  f.Counter("reckon_inbox_pauses_total",
            "Gossip streams paused because their frames filled their share of the node's inbox",
            double(c.inbox_pauses));
  f.Counter("reckon_snapshots_expired_total",
            "Snapshot calls this node served that were cancelled past their deadline",
            double(c.snapshots_expired));
  f.Counter("reckon_requests_refused_total",
            "Status and Snapshot calls refused: a wrong token or identity, or too busy",
            double(c.requests_refused));
}

// The node's counters (monotonic since the process started).
void AddCounters(const GossipNode::Counters& c, Families& f) {
  for (const char* codec : {"rice", "packed32", "onebit", "dyntree8", "dense"}) {
    const auto updates = c.updates_received.find(codec);
    const auto bytes = c.bytes_received.find(codec);
    f.Counter("reckon_updates_received_total",
              "Updates of other origins accepted (validated, in order), by wire codec",
              updates == c.updates_received.end() ? 0 : double(updates->second),
              {{"codec", codec}});
    f.Counter("reckon_received_bytes_total",
              "Serialized bytes of the updates of other origins accepted, by wire codec",
              bytes == c.bytes_received.end() ? 0 : double(bytes->second), {{"codec", codec}});
  }
  f.Counter("reckon_duplicates_dropped_total", "Updates received again and dropped",
            double(c.duplicates_dropped));
  f.Counter("reckon_decode_errors_total",
            "Updates refused as malformed (CRC, codec, bounds, checksum contribution)",
            double(c.decode_errors));
  f.Counter("reckon_signature_errors_total", "Updates refused: unsigned, unknown signer, forged",
            double(c.signature_errors));
  f.Counter("reckon_peers_refused_total",
            "Handshakes refused: another cluster's fingerprint, a wrong token or identity",
            double(c.peers_refused));
  f.Counter("reckon_members_refused_total", "New members refused past the member cap",
            double(c.members_refused));
  f.Counter("reckon_members_failed_total",
            "Members this node marked dead: silent past the failure timeout",
            double(c.members_failed));
  f.Counter("reckon_backpressure_seconds_total",
            "Time training paused because our own messages not yet applied by a live peer "
            "filled our share of the log: the links are slower than training",
            c.backpressure_ms / 1000.0);
  f.Counter("reckon_repairs_sent_total",
            "Updates sent by anti-entropy (relays, late first copies and resends)",
            double(c.repairs_sent));
  f.Counter("reckon_repairs_resent_total",
            "Updates anti-entropy sent to a member that had been sent them before",
            double(c.repairs_resent));
  f.Counter("reckon_update_frames_sent_total",
            "Update frames sent: own messages, forwards down the tree overlay, relays, repairs",
            double(c.update_frames_sent));
  f.Counter("reckon_lane_update_frames_sent_total",
            "Of the update frames sent, those that went on a lane (an extra connection to a "
            "peer, for Updates of 1 MiB or more)",
            double(c.lane_update_frames_sent));
  f.Counter("reckon_gossip_sent_bytes_total",
            "Gossip frames sent on the streams (serialized; heartbeats and relays included)",
            double(c.frame_bytes_sent));
  f.Counter("reckon_gossip_received_bytes_total",
            "Gossip frames received on the streams (serialized; heartbeats included)",
            double(c.frame_bytes_received));
  f.Counter("reckon_queue_drops_total", "Updates dropped from full send queues (repaired later)",
            double(c.queue_drops));
  f.Counter("reckon_early_dropped_total",
            "Early arrivals dropped past the buffer cap (repaired later)", double(c.early_dropped));
  f.Counter("reckon_snapshots_served_total", "Snapshots sent to joining peers",
            double(c.snapshots_served));
  f.Counter("reckon_snapshots_loaded_total", "Snapshots this node joined or re-joined from",
            double(c.snapshots_loaded));
  f.Counter("reckon_replica_checks_total",
            "Checks of the training replica's checksum against the messages it applied",
            double(c.replica_checks));
  f.Counter("reckon_replica_check_failures_total", "Replica checks that failed (then repaired)",
            double(c.replica_check_failures));
  f.Counter("reckon_replica_repairs_total", "Re-joins from a peer's snapshot after a failed check",
            double(c.replica_repairs));
  f.Counter("reckon_peer_checks_agreed_total", "Peers' replica checks that matched our messages",
            double(c.peer_checks_agreed));
  f.Counter("reckon_divergences_total",
            "Peers' replica checks that did not match our messages: a divergence",
            double(c.divergences));
}

// The node's state now, and each member's.
void AddState(const v1::NodeStatus& s, uint64_t behind, Families& f) {
  f.Gauge("reckon_log_bytes", "Bytes held by the message log (for repairs)", double(s.log_bytes()));
  f.Gauge("reckon_log_messages", "Messages held by the message log", double(s.log_messages()));
  f.Gauge("reckon_inbox_bytes", "Bytes of frames waiting for the node thread",
          double(s.inbox_bytes()));
  f.Gauge("reckon_dial_targets", "Addresses this node dials while not connected to them",
          double(s.dial_targets()));
  f.Gauge("reckon_early_held_messages", "Early arrivals waiting for a gap to fill",
          double(s.early_held()));
  f.Gauge("reckon_replica_check_duration_seconds", "How long the last replica check took",
          s.last_check_ms() / 1000);
  f.Gauge("reckon_joined", "1 once the node has joined (snapshot loaded or cluster fresh)",
          s.joined() ? 1 : 0);
  f.Gauge("reckon_training_done", "1 once this worker has finished its steps",
          s.training_done() ? 1 : 0);
  f.Gauge("reckon_quiescent", "1 when every live member is done and at one version vector",
          s.quiescent() ? 1 : 0);
  f.Gauge("reckon_messages_behind",
          "Messages the most advanced live member has applied that this node has not",
          double(behind));

  std::map<std::string, int> by_state = {
      {"joining", 0}, {"connecting", 0}, {"alive", 0}, {"dead", 0}, {"left", 0}};
  f.Declare("reckon_peer_up", "1 while the peer is alive (heard within the failure timeout)",
            MetricType::Gauge);
  f.Declare("reckon_peer_lag_messages", "Our messages the peer has not applied yet",
            MetricType::Gauge);
  f.Declare("reckon_peer_last_heard_seconds", "Seconds since the last frame from the peer",
            MetricType::Gauge);
  for (const v1::MemberStatus& m : s.members()) {
    ++by_state[m.state()];
    if (m.state() == "left") continue;  // gone on purpose: not a peer to watch
    f.Gauge("reckon_peer_up", "", m.state() == "alive" ? 1 : 0, {{"peer", m.node_id()}});
    f.Gauge("reckon_peer_lag_messages", "", double(m.lag()), {{"peer", m.node_id()}});
    f.Gauge("reckon_peer_last_heard_seconds", "", m.last_heard_s(), {{"peer", m.node_id()}});
  }
  for (const auto& [state, count] : by_state) {
    f.Gauge("reckon_members", "Members of the cluster this node knows, by state", count,
            {{"state", state}});
  }
}

}  // namespace

std::vector<MetricFamily> NodeMetrics::Collect() const {
  v1::NodeStatus s;
  node_->FillStatus(&s, /*with_weight_hash=*/false);
  Families f(s.node_id());
  const GossipNode::Counters counters = node_->counters();
  AddCounters(counters, f);
  AddLimitCounters(counters, f);
  AddState(s, node_->MessagesBehind(), f);
  return f.Take();
}

std::vector<prometheus::MetricFamily> HttpMetricFamilies(const HttpCounters& counters,
                                                         const std::string& node_id) {
  Families f(node_id);
  f.Counter("reckon_http_connections_evicted_total",
            "HTTP connections closed before their request was complete, for a newer one: the "
            "endpoint held its maximum",
            double(counters.evicted.load()));
  f.Counter("reckon_http_connections_refused_total",
            "HTTP connections answered 503: every connection held was being answered",
            double(counters.refused.load()));
  f.Counter("reckon_http_requests_timed_out_total",
            "HTTP connections dropped: no whole request within the request timeout",
            double(counters.timed_out.load()));
  return f.Take();
}

}  // namespace reckon::server
