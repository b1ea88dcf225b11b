// The training loop's metrics for Prometheus (prefix reckon_, base units):
// families registered once in the constructor, children kept by reference,
// so recording a step only increments and sets. Every series carries `node`.
// docs/guide-monitoring.md lists them. Recorded from one thread (the training
// thread); Prometheus collects from any (prometheus-cpp's metrics are atomic).
#ifndef RECKON_WORKER_METRICS_H_
#define RECKON_WORKER_METRICS_H_

#include <cstdint>
#include <map>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace reckon::worker {

class WorkerMetrics {
 public:
  WorkerMetrics(prometheus::Registry& registry, const std::string& node_id);

  // reckon_build_info{version, backend, codec, device} 1: set once the
  // backend is made.
  void SetBuildInfo(const std::string& backend, const std::string& codec,
                    const std::string& device);
  // One training step of `samples` samples with this summed loss.
  void OnStep(double seconds, int samples, double loss_sum);
  // One step's message, applied locally and sent: its updates and bytes,
  // the fp32 bytes a dense gradient would have taken, the fraction of the
  // parameters it moved (reckon_update_density averages it over about 100
  // steps), and tau (threshold codecs; 0 for dense).
  void OnEmitted(const std::string& codec, uint64_t updates, uint64_t bytes, uint64_t dense_bytes,
                 double density, double tau);
  // The end of an epoch: its mean training loss and the evaluation.
  void OnEpoch(int epochs_done, double train_loss, double test_loss, double test_accuracy);
  // A peer's update applied to the training replica, `seconds` after the
  // node accepted it.
  void OnApplied(double seconds);
  // Training is over (every step run and the cluster quiescent); the worker
  // stays up only with --after-training serve.
  void OnTrainingFinished() { training_finished_.Set(1); }

 private:
  prometheus::Family<prometheus::Gauge>& build_info_;
  prometheus::Counter& steps_;
  prometheus::Counter& samples_;
  prometheus::Gauge& train_loss_;
  prometheus::Histogram& step_seconds_;
  prometheus::Family<prometheus::Counter>& updates_sent_;
  prometheus::Family<prometheus::Counter>& bytes_sent_;
  prometheus::Counter& dense_bytes_;
  prometheus::Gauge& compression_ratio_;
  prometheus::Gauge& update_density_;
  prometheus::Gauge& tau_;
  prometheus::Gauge& epochs_;
  prometheus::Gauge& epoch_train_loss_;
  prometheus::Gauge& test_loss_;
  prometheus::Gauge& test_accuracy_;
  prometheus::Gauge& training_finished_;
  prometheus::Histogram& apply_latency_;

  double density_average_ = -1;  // -1: no message yet
  // Children by codec, made on first use (one codec per run in practice).
  std::map<std::string, prometheus::Counter*> updates_by_codec_;
  std::map<std::string, prometheus::Counter*> bytes_by_codec_;
};

}  // namespace reckon::worker

#endif  // RECKON_WORKER_METRICS_H_
