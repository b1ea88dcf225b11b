// What a running worker shows to operators and probes over HTTP
// (server/http_endpoint.h): /metrics (Prometheus text: the training loop's
// metrics and the gossip node's), /healthz, /readyz and /status.
//
// /healthz: 200 while the process answers and the node's event loop has run
//   recently; never depends on peers.
// /readyz: 200 once the worker can take part: standalone, once training has
//   started; with peers, once joined (a snapshot loaded or the cluster
//   confirmed fresh) and within `ready_max_behind` messages of the most
//   advanced live peer it hears. 503 with the reason otherwise.
// /status: the JSON of `reckonctl status` (404 for a standalone worker).
//
// Threads: the endpoint answers on its own thread; AttachNode, DetachNode
// and SetTrainingStarted come from the worker's main or training thread
// (the node pointer under its own lock). Errors: Start's bind or listen
// error, naming the address.
#ifndef RECKON_WORKER_OBSERVABILITY_H_
#define RECKON_WORKER_OBSERVABILITY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/registry.h"
#include "server/http_endpoint.h"
#include "server/node.h"
#include "server/node_metrics.h"
#include "worker/metrics.h"

namespace reckon::worker {

class Observability {
 public:
  // Serves on `listen` (port 0: a free one). The metrics carry `node_id`.
  static absl::StatusOr<std::unique_ptr<Observability>> Start(const std::string& listen,
                                                              const std::string& node_id,
                                                              uint64_t ready_max_behind);

  int port() const { return endpoint_->port(); }
  WorkerMetrics& metrics() { return *metrics_; }

  // The node, once joined: its metrics, readiness and status. Detach before
  // the node is destroyed (the endpoint may be answering from another thread).
  void AttachNode(server::GossipNode* node);
  void DetachNode();
  // Standalone: training has started (ready from now on).
  void SetTrainingStarted() { training_started_.store(true); }

 private:
  Observability() = default;
  server::HttpResponse Metrics();
  server::HttpResponse Health();
  server::HttpResponse Ready();
  server::HttpResponse Status();

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<WorkerMetrics> metrics_;
  uint64_t ready_max_behind_ = 0;
  std::atomic<bool> training_started_{false};
  absl::Mutex mu_;
  server::GossipNode* node_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::unique_ptr<server::NodeMetrics> node_metrics_ ABSL_GUARDED_BY(mu_);
  bool node_gone_ ABSL_GUARDED_BY(mu_) = false;  // detached: shutting down
  // Last: destroyed first, so no handler runs on a half-destroyed object.
  std::string node_id_;
  std::shared_ptr<server::HttpCounters> http_counters_ = std::make_shared<server::HttpCounters>();
  // /status's last answer and when it was computed (at most once a second).
  static constexpr std::chrono::seconds kStatusCacheFor{1};
  std::string status_cache_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point status_cached_at_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<server::HttpEndpoint> endpoint_;
};

}  // namespace reckon::worker

#endif  // RECKON_WORKER_OBSERVABILITY_H_
