// The gossip node's metrics for Prometheus, read from the node at scrape
// time (a prometheus::Collectable): the node counts in its own structures
// under its own lock, so the hot path pays nothing for being watched. Every
// series carries `node` (this node id); per-peer series add `peer` (a member's
// node id: bounded by the cluster's size). docs/guide-monitoring.md lists them.
//
// Threads: Collect runs on the HTTP endpoint's thread; it reads the node
// through ServicePort, which takes the node's lock briefly. Errors: none (a
// scrape of a stopping node reads what its counters hold).
#ifndef RECKON_SERVER_NODE_METRICS_H_
#define RECKON_SERVER_NODE_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/http_endpoint.h"
#include "server/node.h"

namespace reckon::server {

class NodeMetrics final : public prometheus::Collectable {
 public:
  // `node` must outlive every Collect call.
  explicit NodeMetrics(GossipNode* node) : node_(node) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  GossipNode* node_;
};

// The entries of a map<string, uint64> field of the node's counters (by
// codec): what /metrics and the worker's summary read by reflection.
std::map<std::string, uint64_t> CounterMap(const v1::NodeCounters& counters,
                                           const google::protobuf::FieldDescriptor* field);

// The HTTP endpoint's limits (server/http_endpoint.h), labelled with
// `node_id`: reckon_http_connections_evicted_total, _refused_total,
// reckon_http_requests_timed_out_total.
std::vector<prometheus::MetricFamily> HttpMetricFamilies(const HttpCounters& counters,
                                                         const std::string& node_id);

}  // namespace reckon::server

#endif  // RECKON_SERVER_NODE_METRICS_H_
