#include "worker/metrics.h"

namespace reckon::worker {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// Step and apply times: 100 us to 30 s, about three buckets per decade.
Histogram::BucketBoundaries SecondsBuckets() {
  return {1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30};
}

// A family of one child, labelled with the node.
prometheus::Counter& Counter(prometheus::Registry& r, const std::string& node,
                             const std::string& name, const std::string& help) {
  return BuildCounter().Name(name).Help(help).Labels({{"node", node}}).Register(r).Add({});
}
prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& node, const std::string& name,
                         const std::string& help) {
  return BuildGauge().Name(name).Help(help).Labels({{"node", node}}).Register(r).Add({});
}
prometheus::Histogram& Seconds(prometheus::Registry& r, const std::string& node,
                               const std::string& name, const std::string& help) {
  return BuildHistogram()
      .Name(name)
      .Help(help)
      .Labels({{"node", node}})
      .Register(r)
      .Add({}, SecondsBuckets());
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& r, const std::string& node_id)
    : build_info_(BuildGauge()
                      .Name("reckon_build_info")
                      .Help("Always 1: the version, backend, codec and device, as labels")
                      .Labels({{"node", node_id}})
                      .Register(r)),
      steps_(Counter(r, node_id, "reckon_steps_total", "Training steps taken by this worker")),
      samples_(
          Counter(r, node_id, "reckon_samples_total", "Training samples processed by this worker")),
      train_loss_(Gauge(r, node_id, "reckon_train_loss",
                        "Mean cross-entropy of the last training step's batch")),
      step_seconds_(Seconds(r, node_id, "reckon_step_duration_seconds",
                            "One training step: batch, forward, backward, emission, apply")),
      updates_sent_(BuildCounter()
                        .Name("reckon_updates_sent_total")
                        .Help("+-tau updates this worker emitted and sent, by wire codec")
                        .Labels({{"node", node_id}})
                        .Register(r)),
      bytes_sent_(BuildCounter()
                      .Name("reckon_sent_bytes_total")
                      .Help("Serialized bytes of this worker's messages, by wire codec (dense: "
                            "fp32 per parameter)")
                      .Labels({{"node", node_id}})
                      .Register(r)),
      dense_bytes_(Counter(r, node_id, "reckon_dense_equivalent_bytes_total",
                           "What fp32 gradients of the same steps would have taken")),
      compression_ratio_(Gauge(r, node_id, "reckon_compression_ratio",
                               "Dense fp32 bytes over bytes sent, since the start")),
      update_density_(
          Gauge(r, node_id, "reckon_update_density",
                "Fraction of the parameters a message moves, averaged over about 100 steps")),
      tau_(Gauge(r, node_id, "reckon_tau", "The threshold step tau in force (0 for dense)")),
      epochs_(Gauge(r, node_id, "reckon_epochs_done", "Epochs finished by this worker")),
      epoch_train_loss_(Gauge(r, node_id, "reckon_epoch_train_loss",
                              "Mean training loss of the last finished epoch")),
      test_loss_(Gauge(r, node_id, "reckon_test_loss",
                       "Test loss of the replica at the last finished epoch")),
      test_accuracy_(Gauge(r, node_id, "reckon_test_accuracy_ratio",
                           "Test accuracy (0 to 1) of the replica at the last finished epoch")),
      training_finished_(Gauge(r, node_id, "reckon_training_finished",
                               "1 once this worker's training is over (it serves on with "
                               "--after-training serve), 0 before")),
      apply_latency_(Seconds(r, node_id, "reckon_apply_latency_seconds",
                             "From the node accepting a peer's update to the training replica "
                             "applying it")) {}

void WorkerMetrics::SetBuildInfo(const std::string& backend, const std::string& codec,
                                 const std::string& device) {
  build_info_
      .Add(
          {{"version", RECKON_VERSION}, {"backend", backend}, {"codec", codec}, {"device", device}})
      .Set(1);
}

void WorkerMetrics::OnStep(double seconds, int samples, double loss_sum) {
  steps_.Increment();
  samples_.Increment(samples);
  train_loss_.Set(samples > 0 ? loss_sum / samples : 0);
  step_seconds_.Observe(seconds);
}

void WorkerMetrics::OnEmitted(const std::string& codec, uint64_t updates, uint64_t bytes,
                              uint64_t dense_bytes, double density, double tau) {
  prometheus::Counter*& updates_counter = updates_by_codec_[codec];
  if (updates_counter == nullptr) updates_counter = &updates_sent_.Add({{"codec", codec}});
  prometheus::Counter*& bytes_counter = bytes_by_codec_[codec];
  if (bytes_counter == nullptr) bytes_counter = &bytes_sent_.Add({{"codec", codec}});
  updates_counter->Increment(double(updates));
  bytes_counter->Increment(double(bytes));
  dense_bytes_.Increment(double(dense_bytes));
  double wire = 0;
  for (const auto& [name, counter] : bytes_by_codec_) wire += counter->Value();
  compression_ratio_.Set(wire > 0 ? dense_bytes_.Value() / wire : 0);
  // Emission is bursty (most steps send little, some much): the last step
  // alone says little, a moving average says how dense messages are.
  density_average_ =
      density_average_ < 0 ? density : density_average_ + 0.01 * (density - density_average_);
  update_density_.Set(density_average_);
  tau_.Set(tau);
}

void WorkerMetrics::OnEpoch(int epochs_done, double train_loss, double test_loss,
                            double test_accuracy) {
  epochs_.Set(epochs_done);
  epoch_train_loss_.Set(train_loss);
  test_loss_.Set(test_loss);
  test_accuracy_.Set(test_accuracy);
}

void WorkerMetrics::OnApplied(double seconds) { apply_latency_.Observe(seconds); }

}  // namespace reckon::worker
