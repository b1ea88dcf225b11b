#include "worker/observability.h"

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace reckon::worker {
namespace {

// The node loop runs every heartbeat interval; this much silence means it is
// stuck, whatever the configured interval.
constexpr std::chrono::seconds kLoopStuckAfter{30};

server::HttpResponse Text(int status, std::string body) {
  return {status, "text/plain; charset=utf-8", std::move(body)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<Observability>> Observability::Start(const std::string& listen,
                                                                    const std::string& node_id,
                                                                    uint64_t ready_max_behind) {
  std::unique_ptr<Observability> o(new Observability());
  o->registry_ = std::make_shared<prometheus::Registry>();
  o->metrics_ = std::make_unique<WorkerMetrics>(*o->registry_, node_id);
  o->ready_max_behind_ = ready_max_behind;
  o->node_id_ = node_id;
  Observability* self = o.get();
  server::HttpOptions http;
  http.counters = o->http_counters_;
  absl::StatusOr<std::unique_ptr<server::HttpEndpoint>> endpoint =
      server::HttpEndpoint::Start(listen,
                                  {{"/metrics", [self] { return self->Metrics(); }},
                                   {"/healthz", [self] { return self->Health(); }},
                                   {"/readyz", [self] { return self->Ready(); }},
                                   {"/status", [self] { return self->Status(); }}},
                                  http);
  if (!endpoint.ok()) return endpoint.status();
  o->endpoint_ = *std::move(endpoint);
  return o;
}

void Observability::AttachNode(server::GossipNode* node) {
  absl::MutexLock l(&mu_);
  node_ = node;
  node_metrics_ = std::make_unique<server::NodeMetrics>(node);
}

void Observability::DetachNode() {
  absl::MutexLock l(&mu_);
  node_ = nullptr;
  node_metrics_.reset();
  node_gone_ = true;
}

server::HttpResponse Observability::Metrics() {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (prometheus::MetricFamily& f : server::HttpMetricFamilies(*http_counters_, node_id_)) {
    families.push_back(std::move(f));
  }
  {
    absl::MutexLock l(&mu_);
    if (node_metrics_) {
      std::vector<prometheus::MetricFamily> node = node_metrics_->Collect();
      families.insert(families.end(), std::make_move_iterator(node.begin()),
                      std::make_move_iterator(node.end()));
    }
  }
  return {200, "text/plain; version=0.0.4; charset=utf-8",
          prometheus::TextSerializer().Serialize(families)};
}

server::HttpResponse Observability::Health() {
  absl::MutexLock l(&mu_);
  if (node_ != nullptr && node_->service().started() &&
      node_->service().LoopAge() > kLoopStuckAfter) {
    return Text(503, absl::StrCat("the gossip node's loop has not run for ",
                                  node_->service().LoopAge().count(), " ms\n"));
  }
  return Text(200, "ok\n");
}

server::HttpResponse Observability::Ready() {
  absl::MutexLock l(&mu_);
  if (node_gone_) return Text(503, "shutting down\n");
  if (node_ == nullptr) {
    return training_started_.load() ? Text(200, "ready: training alone\n")
                                    : Text(503, "not ready: joining the cluster\n");
  }
  if (!node_->service().started()) return Text(503, "not ready: joining the cluster\n");
  const uint64_t behind = node_->service().MessagesBehind();
  if (behind > ready_max_behind_) {
    return Text(503, absl::StrCat("not ready: ", behind,
                                  " messages behind the most advanced peer (at most ",
                                  ready_max_behind_, ")\n"));
  }
  return Text(200, absl::StrCat("ready: joined, ", behind, " messages behind\n"));
}

server::HttpResponse Observability::Status() {
  absl::MutexLock l(&mu_);
  if (node_ == nullptr) {
    return Text(404,
                node_gone_ ? "shutting down\n" : "no gossip node (standalone, or still joining)\n");
  }
  // The status hashes the whole replica (a third of a second at Strom's
  // size) on the endpoint's one thread: computed at most once a second,
  // so a client asking again and again cannot keep probes waiting.
  const auto now = std::chrono::steady_clock::now();
  if (status_cache_.empty() || now - status_cached_at_ >= kStatusCacheFor) {
    v1::NodeStatus status;
    node_->service().FillStatus(&status);
    status_cache_ = server::NodeStatusJson(status);
    status_cached_at_ = now;
  }
  return {200, "application/json", status_cache_};
}

}  // namespace reckon::worker
