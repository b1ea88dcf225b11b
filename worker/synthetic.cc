#include "worker/synthetic.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/wall_clock.h"
#include "codec/update_message.h"
#include "model/model.h"
#include "worker/backend_factory.h"
#include "worker/publisher.h"

namespace reckon::worker {
namespace {

using Clock = std::chrono::steady_clock;

// The process's CPU time so far (user + system, every thread).
double ProcessCpuSeconds() {
  timespec t = {};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// `count` distinct indices below `params`, ascending, each with a random sign
// bit: the words of one threshold message. `used` (params entries, all 0)
// marks what is drawn and is left all 0 again: clearing it costs the message's
// size, not the model's.
void DrawWords(std::mt19937_64& rng, uint64_t params, int64_t count, std::vector<uint32_t>* words,
               std::vector<uint8_t>* used) {
  words->clear();
  std::uniform_int_distribution<uint64_t> index(0, params - 1);
  while (static_cast<int64_t>(words->size()) < count) {
    const uint64_t i = index(rng);
    if ((*used)[i]) continue;
    (*used)[i] = 1;
    words->push_back(static_cast<uint32_t>(i));
  }
  std::sort(words->begin(), words->end());
  for (uint32_t& w : *words) {
    (*used)[w] = 0;
    w |= static_cast<uint32_t>(rng() & 1) << 31;
  }
}

// The emitting loop: one message per step, paced to `rate`, applying what
// peers sent before each. Fills the summary's step and byte tallies.
absl::Status Emit(const TrainerOptions& o, const SyntheticOptions& synthetic,
                  model::Backend& backend, TrainSummary* summary) {
  const uint64_t params = o.backend_config.shape.param_count();
  // Messages differ between origins and between restarts of one.
  std::mt19937_64 rng(o.seed ^ std::hash<std::string>()(o.node_id) ^ o.incarnation);
  std::vector<uint32_t> words;
  std::vector<uint8_t> used(params, 0);
  PublisherOptions publishing;
  publishing.node_id = o.node_id;
  publishing.incarnation = o.incarnation;
  publishing.param_count = params;
  publishing.wire_codec = o.wire_codec;
  publishing.sink = [peers = o.peers](v1::Update message, const codec::DecodedUpdate& decoded) {
    return peers->Publish(std::move(message), decoded);
  };
  publishing.metrics = o.metrics;
  publishing.stamp_emitted = true;  // ArrivalLog's latencies
  Publisher publisher(std::move(publishing));
  const auto start = Clock::now();
  const double cpu_at_start = ProcessCpuSeconds();
  int64_t steps = 0;
  while ((o.max_steps == 0 || steps < o.max_steps) && !(o.stop != nullptr && o.stop->load())) {
    RECKON_RETURN_IF_ERROR(o.peers->BeforeStep(backend, static_cast<uint64_t>(steps)));
    DrawWords(rng, params, synthetic.updates_per_message, &words, &used);
    RECKON_ASSIGN_OR_RETURN(
        const Published sent,
        publisher.PublishThreshold(&backend, words, o.backend_config.step, WordsFrom::kElsewhere));
    ++steps;
    summary->updates_sent += sent.updates;
    summary->wire_bytes += sent.wire_bytes;
    if (synthetic.rate > 0) {
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(double(steps) / synthetic.rate)));
    }
  }
  summary->steps = steps;
  summary->train_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  summary->emit_cpu_seconds = ProcessCpuSeconds() - cpu_at_start;
  summary->stopped_early = o.stop != nullptr && o.stop->load();
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSyntheticOptions(const SyntheticOptions& synthetic, uint64_t param_count) {
  if (synthetic.updates_per_message < 1 ||
      static_cast<uint64_t>(synthetic.updates_per_message) > param_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--synthetic-updates ", synthetic.updates_per_message,
                     " must be from 1 to the model's ", param_count, " parameters (--layers)"));
  }
  if (!(synthetic.rate >= 0) || synthetic.rate > 1e6) {
    return absl::InvalidArgumentError(
        "--synthetic-rate must be from 0 (as fast as it can) to 1e6 messages per second");
  }
  return absl::OkStatus();
}

std::function<void(const server::OriginKey&, const v1::Update&)> ArrivalLog::Hook() {
  return [this](const server::OriginKey& origin, const v1::Update& update) {
    if (update.emitted_unix_ns() == 0) return;
    const int64_t micros =
        (base::UnixNanos() - static_cast<int64_t>(update.emitted_unix_ns())) / 1000;
    absl::MutexLock l(&mu_);
    if (size_ >= kMaxArrivals) {
      ++dropped_;
      return;
    }
    by_origin_[origin.node_id].emplace_back(update.seq(), micros);
    ++size_;
  };
}

base::Json ArrivalLog::ToJson() {
  absl::MutexLock l(&mu_);
  base::Json out = base::Json::object();
  for (const auto& [origin, arrivals] : by_origin_) {
    base::Json list = base::Json::array();
    for (const auto& [seq, micros] : arrivals) list.push_back(base::Json::array({seq, micros}));
    out[origin] = std::move(list);
  }
  return out;
}

uint64_t ArrivalLog::dropped() {
  absl::MutexLock l(&mu_);
  return dropped_;
}

absl::StatusOr<TrainSummary> RunSynthetic(const TrainerOptions& options,
                                          const SyntheticOptions& synthetic, std::ostream& log) {
  if (options.peers == nullptr) {
    return absl::InvalidArgumentError("--synthetic needs peers (--node-id, --peers)");
  }
  const model::BackendConfig& config = options.backend_config;
  RECKON_RETURN_IF_ERROR(CheckSyntheticOptions(synthetic, config.shape.param_count()));
  std::string chosen;
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> backend,
                          MakeBackend(options.backend, config, &chosen));
  RECKON_ASSIGN_OR_RETURN(const std::vector<int64_t> initial,
                          model::InitialWeights(config.shape, config.fraction_bits, options.seed));
  RECKON_RETURN_IF_ERROR(backend->LoadWeights(initial));
  log << absl::StrFormat(
      "reckon-worker: synthetic: %d updates per message, %s, replica on %s\n",
      synthetic.updates_per_message,
      synthetic.rate > 0 ? absl::StrCat(synthetic.rate, " messages/s") : "as fast as it can",
      chosen);
  TrainSummary summary;
  summary.backend = backend->Describe();
  summary.model = config.shape.ToString();
  summary.params = config.shape.param_count();
  summary.codec = "synthetic";
  summary.tau = config.step.tau;
  summary.step_quanta = config.step.step_quanta;
  RECKON_RETURN_IF_ERROR(Emit(options, synthetic, *backend, &summary));
  RECKON_RETURN_IF_ERROR(
      options.peers->Finish(*backend, static_cast<uint64_t>(summary.steps), options.stop));
  summary.dense_bytes = uint64_t(summary.steps) * summary.params * sizeof(float);
  summary.compression_ratio =
      summary.wire_bytes ? double(summary.dense_bytes) / double(summary.wire_bytes) : 0;
  summary.update_density =
      summary.steps ? double(summary.updates_sent) / (double(summary.steps) * summary.params) : 0;
  RECKON_ASSIGN_OR_RETURN(summary.weight_hash, backend->WeightHash());
  summary.node_id = options.node_id;
  summary.incarnation = options.incarnation;
  summary.version_vector = options.peers->VersionVector();
  summary.node_counters = options.peers->Counters();
  return summary;
}

}  // namespace reckon::worker
