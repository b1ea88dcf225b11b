// reckonctl bench inbound, the training thread's side (ctl/bench_inbound.h).
#include <algorithm>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "codec/fixed_point.h"
#include "ctl/bench_inbound.h"
#include "model/backend.h"
#include "model/model.h"
#include "worker/backend_factory.h"
#include "worker/publisher.h"

namespace reckon::ctl::inbound {

// The model (the default one unless --train-layers), batch 100, threshold
// 0.005, on random standardized inputs (20 batches, cycled: the arithmetic
// is that of real data), on the backend asked for.
absl::StatusOr<TrainingFigures> MeasureTraining(int origins, int steps, int threads,
                                                const TrainingModel& model) {
  TrainingFigures out;
  out.origins = origins;
  out.steps = steps;
  out.threads = threads;
  constexpr int kBatch = 100, kBatches = 20;
  RECKON_ASSIGN_OR_RETURN(model::ModelShape shape,
                          model::ModelShape::Parse(model.layers, model.activation));
  out.params = shape.param_count();
  model::BackendConfig config;
  config.shape = shape;
  config.max_batch = kBatch;
  config.mode = model::UpdateMode::kThreshold;
  config.codec.codec = v1::CODEC_THRESHOLD_RICE;
  RECKON_ASSIGN_OR_RETURN(config.step, codec::MakeThresholdStep(0.005, kFractionBits));
  config.optimizer.learning_rate = 0.01;
  config.threads = threads;
  std::string chosen;
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> backend,
                          worker::MakeBackend(model.backend, config, &chosen));
  out.backend = backend->Describe();
  RECKON_ASSIGN_OR_RETURN(codec::FixedPointReplica init,
                          codec::FixedPointReplica::Create(shape.param_count(), kFractionBits));
  RECKON_RETURN_IF_ERROR(model::InitializeModel(shape, kSeed, &init));
  RECKON_RETURN_IF_ERROR(backend->LoadWeights(init.quanta()));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(kBatches) * kBatch * shape.inputs());
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> labels(size_t(kBatches) * kBatch);
  for (int32_t& l : labels) l = static_cast<int32_t>(rng() % shape.classes());
  model::Emission emission;
  int next_batch = 0;
  const auto stage = [&](int k) {
    const size_t b = size_t(k % kBatches);
    return backend->StageBatch(
        std::span<const float>(x).subspan(b * kBatch * shape.inputs(), kBatch * shape.inputs()),
        std::span<const int32_t>(labels).subspan(b * kBatch, kBatch));
  };
  // As the trainer steps: in halves, the next batch staged while one computes.
  RECKON_RETURN_IF_ERROR(stage(next_batch));
  auto train = [&]() -> absl::Status {
    RECKON_RETURN_IF_ERROR(backend->LaunchTrainStep(0.01f, &emission));
    const absl::Status staged = stage(++next_batch);
    RECKON_RETURN_IF_ERROR(backend->FinishTrainStep().status());
    return staged;
  };
  // The trainer's own publishing path (worker/publisher.h): alone, nothing
  // sent; then into the node.
  worker::PublisherOptions publishing;
  publishing.node_id = "trainer";
  publishing.incarnation = 1;
  publishing.param_count = shape.param_count();
  worker::Publisher alone(publishing);
  auto train_alone = [&]() -> absl::Status {
    RECKON_RETURN_IF_ERROR(train());
    return alone
        .PublishThreshold(backend.get(), emission.words, config.step,
                          worker::WordsFrom::kLastEmission)
        .status();
  };
  for (int i = 0; i < 5; ++i) RECKON_RETURN_IF_ERROR(train_alone());  // warm-up
  double emitted = 0;
  Clock::time_point t0 = Clock::now();
  for (int i = 0; i < steps; ++i) {
    RECKON_RETURN_IF_ERROR(train_alone());
    emitted += double(emission.words.size());
  }
  out.step_ms_alone = MsSince(t0) / steps;
  out.emitted_updates = emitted / steps;
  out.offered_messages_per_s = origins * 1e3 / out.step_ms_alone;

  // Each origin's messages: the size the trainer emits, one a step.
  const Size size{"default", shape.param_count(),
                  std::max<uint64_t>(1, static_cast<uint64_t>(out.emitted_updates))};
  std::vector<std::vector<v1::GossipFrame>> frames;
  for (int i = 0; i < origins; ++i) {
    frames.push_back(MakeMessages(absl::StrCat("o", i), size, steps, 2000 + uint64_t(i)));
  }
  server::NodeOptions o;
  o.node_id = "trainer";
  o.incarnation = 1;
  o.fingerprint = Fingerprint(shape.param_count());
  o.replica = server::NodeOptions::Replica::kTrainingThread;  // a worker's node
  RECKON_ASSIGN_OR_RETURN(Receiver receiver, StartReceiver(o, init.quanta(), origins));
  server::GossipNode* node = receiver.node.get();
  std::vector<std::unique_ptr<Origin>>& senders = receiver.origins;
  std::atomic<bool> stop{false};
  const auto interval = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(out.step_ms_alone));
  const uint64_t node_cpu_before = ThreadCpuNs("reckon-gossip");
  const uint64_t recv_cpu_before = ThreadCpuNs("reckon-recv");
  t0 = Clock::now();
  std::vector<std::thread> writers;
  for (int i = 0; i < origins; ++i) {
    writers.emplace_back([&, i] { senders[i]->SendPaced(frames[i], t0, interval, stop); });
  }
  // A worker's step with gossip on (worker/gossip_peers.cc BeforeStep, then
  // the trainer's publisher): the peers' messages applied in one batch, the
  // step, its own emission encoded, applied and published.
  publishing.sink = [node](v1::Update message, const codec::DecodedUpdate& decoded) {
    return node->training().Publish(std::move(message), decoded);
  };
  worker::Publisher publisher(publishing);
  absl::Status status;
  double apply_ms = 0, publish_ms = 0;
  for (int i = 0; i < steps && status.ok(); ++i) {
    Clock::time_point at = Clock::now();
    server::Received received = node->training().TakeReceived();
    std::vector<model::UpdateRef> batch;
    for (const auto& u : received.updates)
      batch.push_back({u->step_quanta, u->words, u->decoded_quanta()});
    status = backend->ApplyUpdateBatch(batch);
    out.messages_absorbed += received.updates.size();
    apply_ms += MsSince(at);
    if (status.ok()) status = train();
    if (!status.ok()) break;
    at = Clock::now();
    status = publisher
                 .PublishThreshold(backend.get(), emission.words, config.step,
                                   worker::WordsFrom::kLastEmission)
                 .status();
    publish_ms += MsSince(at);
  }
  out.step_ms_absorbing = MsSince(t0) / steps;
  const uint64_t node_cpu_ns = ThreadCpuNs("reckon-gossip") - node_cpu_before;
  const uint64_t recv_cpu_ns = ThreadCpuNs("reckon-recv") - recv_cpu_before;
  const uint64_t accepted = node->service().counters().updates_applied();
  stop = true;
  for (std::thread& w : writers) w.join();
  senders.clear();
  node->Stop(false, std::chrono::milliseconds(0));
  receiver.server->Shutdown(std::chrono::milliseconds(1000));
  RECKON_RETURN_IF_ERROR(status);
  out.apply_ms_absorbing = apply_ms / steps;
  out.publish_ms_absorbing = publish_ms / steps;
  if (accepted > 0) {
    out.node_cpu_ms_per_message = node_cpu_ns / 1e6 / double(accepted);
    out.validation_cpu_ms_per_message = recv_cpu_ns / 1e6 / double(accepted);
  }
  return out;
}

void PrintTraining(const TrainingFigures& f, bool json, std::ostream& out) {
  if (json) {
    out << base::Json{{"section", "training"},
                      {"params", f.params},
                      {"backend", f.backend},
                      {"origins", f.origins},
                      {"steps", f.steps},
                      {"threads", f.threads},
                      {"emitted_updates_per_step", f.emitted_updates},
                      {"offered_messages_per_s", f.offered_messages_per_s},
                      {"step_ms_alone", f.step_ms_alone},
                      {"step_ms_absorbing", f.step_ms_absorbing},
                      {"step_ratio", f.step_ms_absorbing / f.step_ms_alone},
                      {"apply_ms_per_step", f.apply_ms_absorbing},
                      {"publish_ms_per_step", f.publish_ms_absorbing},
                      {"messages_absorbed", f.messages_absorbed},
                      {"node_cpu_ms_per_message", f.node_cpu_ms_per_message},
                      {"validation_cpu_ms_per_message", f.validation_cpu_ms_per_message}}
               .dump()
        << "\n";
    return;
  }
  out << absl::StrFormat(
      "Training while absorbing (%s, %d parameters, batch 100, threshold 0.005, %d steps, "
      "%s):\n"
      "  alone: %.3f ms a step, %.0f updates emitted a step\n"
      "  with %d origins each sending one such message a step (%.0f msg/s): %.3f ms a step "
      "(%.3fx alone), of which %.3f ms applying the peers' messages and %.3f ms encoding and "
      "publishing its own; %llu of %d messages applied by the trainer; node CPU %.3f ms and "
      "validation CPU %.3f ms a message\n",
      f.backend, f.params, f.steps,
      f.threads > 0 ? absl::StrCat(f.threads, " threads") : "every core", f.step_ms_alone,
      f.emitted_updates, f.origins, f.offered_messages_per_s, f.step_ms_absorbing,
      f.step_ms_absorbing / f.step_ms_alone, f.apply_ms_absorbing, f.publish_ms_absorbing,
      static_cast<unsigned long long>(f.messages_absorbed), f.origins * f.steps,
      f.node_cpu_ms_per_message, f.validation_cpu_ms_per_message);
}

}  // namespace reckon::ctl::inbound
