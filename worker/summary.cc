#include "worker/summary.h"

#include <sys/resource.h>

namespace reckon::worker {

base::Json SummaryToJson(const TrainSummary& s) {
  base::Json j;
  j["test_accuracy"] = s.test_accuracy;
  j["test_loss"] = s.test_loss;
  j["train_loss"] = s.train_loss;
  j["epochs"] = s.epochs;
  j["steps"] = s.steps;
  j["batch"] = s.batch;
  j["batch_choices"] = s.batch_choices;
  j["samples"] = s.samples;
  j["train_seconds"] = s.train_seconds;
  j["samples_per_s"] = s.samples_per_s;
  j["train_flops_per_s"] = s.train_flops_per_s;
  j["params"] = s.params;
  j["model"] = s.model;
  j["backend"] = s.backend;
  j["codec"] = s.codec;
  j["threshold"] = s.threshold;
  j["tau"] = s.tau;
  j["step_quanta"] = s.step_quanta;
  j["target_density"] = s.target_density;
  j["updates_sent"] = s.updates_sent;
  j["update_density"] = s.update_density;
  j["wire_bytes"] = s.wire_bytes;
  j["dense_bytes"] = s.dense_bytes;
  j["compression_ratio"] = s.compression_ratio;
  j["weight_hash"] = s.weight_hash;
  j["node_id"] = s.node_id;
  j["incarnation"] = s.incarnation;
  j["version_vector"] = s.version_vector;
  j["node"] = s.node_counters;
  j["momentum_matched"] = s.momentum_matched;
  j["max_training_members"] = s.max_training_members;
  j["max_peer_round_trip_steps"] = s.max_peer_round_trip_steps;
  j["stopped_early"] = s.stopped_early;
  j["final"] = s.final_replica;
  j["agreements"] = s.agreements;
  j["pretrained"] = s.pretrained;
  j["pretrain_seconds"] = s.pretrain_seconds;
  j["pretrain_start_bytes"] = s.pretrain_start_bytes;
  j["bytes_sent"] = s.bytes_sent;
  j["bytes_received"] = s.bytes_received;
  j["cpu_seconds"] = s.cpu_seconds;
  j["max_rss_bytes"] = s.max_rss_bytes;
  if (!s.arrivals.empty()) {
    j["emit_cpu_seconds"] = s.emit_cpu_seconds;
    j["arrivals"] = s.arrivals;
    j["arrivals_dropped"] = s.arrivals_dropped;
  }
  return j;
}

void AddResourceUse(TrainSummary* summary) {
  const base::Json& node = summary->node_counters;
  if (node.contains("bytes_sent")) summary->bytes_sent = node["bytes_sent"].get<uint64_t>();
  if (node.contains("bytes_received")) {
    summary->bytes_received = node["bytes_received"].get<uint64_t>();
  }
  rusage usage = {};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    auto seconds = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
    summary->cpu_seconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    summary->max_rss_bytes = uint64_t(usage.ru_maxrss) * 1024;  // Linux: KiB
  }
}

}  // namespace reckon::worker
