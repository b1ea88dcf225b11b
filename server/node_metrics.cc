#include "server/node_metrics.h"

#include <google/protobuf/reflection.h>

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

}  // namespace

std::map<std::string, uint64_t> CounterMap(const v1::NodeCounters& counters,
                                           const google::protobuf::FieldDescriptor* field) {
  std::map<std::string, uint64_t> out;
  const google::protobuf::Reflection* r = counters.GetReflection();
  for (const auto& entry : r->GetRepeatedFieldRef<google::protobuf::Message>(counters, field)) {
    const google::protobuf::Descriptor* e = entry.GetDescriptor();
    out[entry.GetReflection()->GetString(entry, e->map_key())] =
        entry.GetReflection()->GetUInt64(entry, e->map_value());
  }
  return out;
}

namespace {

// Every field of the node's counters, as its MetricOptions say
// (proto/reckon.proto): the proto is the one list of them.
void AddCounters(const v1::NodeCounters& c, Families& f) {
  const google::protobuf::Descriptor* d = c.GetDescriptor();
  const google::protobuf::Reflection* r = c.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = d->field(i);
    const v1::MetricOptions& metric = field->options().GetExtension(v1::metric);
    const std::string name =
        metric.name().empty() ? "reckon_" + field->name() + "_total" : metric.name();
    if (field->is_map()) {
      // Each listed key exposed, 0 until counted.
      std::map<std::string, uint64_t> by_key = CounterMap(c, field);
      for (const std::string& key : metric.label_values()) {
        f.Counter(name, metric.help(), double(by_key[key]), {{metric.label(), key}});
      }
      continue;
    }
    double value = double(r->GetUInt64(c, field));
    // Counted in milliseconds, exposed in seconds (Prometheus' base unit).
    if (field->name().ends_with("_ms") && name.ends_with("_seconds_total")) value /= 1000.0;
    f.Counter(name, metric.help(), value);
  }
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
  node_->service().FillStatus(&s, /*with_weight_hash=*/false);
  Families f(s.node_id());
  AddCounters(s.counters(), f);  // FillStatus copied them already
  AddState(s, node_->service().MessagesBehind(), f);
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
