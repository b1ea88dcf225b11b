// The gossip node's metrics for Prometheus, read from the node at scrape
// time (a prometheus::Collectable): the node counts in its own structures
// under its own lock, so the hot path pays nothing for being watched. Every
// series carries `node` (this node id); per-peer series add `peer` (a member's
// node id: bounded by the cluster's size). README "Monitoring" lists them.
#ifndef RECKON_SERVER_NODE_METRICS_H_
#define RECKON_SERVER_NODE_METRICS_H_

#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
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

}  // namespace reckon::server

#endif  // RECKON_SERVER_NODE_METRICS_H_
