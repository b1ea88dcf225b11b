// reckonctl bench train: a training step's FLOP/s on the CPU backend against
// OpenBLAS sgemm FLOP/s on exactly the GEMM shapes the step runs, in one run.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"
#include "codec/codec.h"
#include "codec/crc32c.h"
#include "codec/elementwise.h"
#include "codec/update_message.h"
#include "codec/weight_checksum.h"
#include "cpu/cpu_backend.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"
#include "model/backend.h"
#include "server/tls.h"
#include "server/update_signature.h"
#include "worker/dataset.h"

ABSL_FLAG(std::string, layers, "784,512,512,10", "the model's layer widths, input first");
ABSL_FLAG(int64_t, batch, 100, "minibatch");
ABSL_FLAG(std::string, codec, "threshold", "threshold, onebit, dyntree8 or dense");
ABSL_FLAG(int64_t, threads, 0, "CPU threads (0: all cores)");

namespace reckon::ctl {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A quanta codec's round trip, each part timed alone over `steps` runs on
// `threads` threads, in ms a step: what the worker does with each step's
// residual besides training (worker/publisher.h).
struct RoundTrip {
  double encode_ms = 0;  // codec::EncodeWithFeedback: check, encode, feedback
  // The dense codec with feedback: the same encode inside the optimizer's
  // pass (codec::DenseFeedbackPass), as the CPU backend runs it: what that
  // pass (pass_ms) takes beyond the residual's writer alone (writer_ms),
  // both timed. The difference of two timings: where the encode costs less
  // than their noise (a toy model timed for a few steps on a loaded
  // machine) the pass can time under the writer; the encode then counts as
  // 0, not as a negative cost, and pass_ms and writer_ms say so.
  bool encode_in_pass = false;
  double writer_ms = 0;
  double pass_ms = 0;
  double in_pass_encode_ms() const { return std::max(0.0, pass_ms - writer_ms); }
  double round_trip_encode_ms() const { return encode_in_pass ? in_pass_encode_ms() : encode_ms; }
  double check_ms = 0;  // the publisher's self-check, codec::CheckQuantaUpdate
  double apply_ms = 0;  // the replica's dense apply (codec::FixedPointReplica::ApplyDense)
  // Dense: the self-check in the apply, one walk (codec::CheckAndApplyDenseUpdate),
  // what the worker runs; the two above, timed beside it, are the same
  // work in two walks.
  bool check_in_apply = false;
  double checked_apply_ms = 0;
  double total_ms() const {
    return round_trip_encode_ms() + (check_in_apply ? checked_apply_ms : check_ms + apply_ms);
  }
  // What the apply moves a parameter: it reads the delta (a dense payload's
  // 4-byte value or an int64) and the replica's quanta, and writes the
  // quanta and the float copy.
  double apply_bytes_per_param = 0;
  // The payload's CRC-32C alone on one thread (the encode and the check
  // each compute one, on the step's threads): as Crc32c chooses, and by
  // the crc32 instruction's three streams, side by side.
  uint64_t payload_bytes = 0;
  double crc32c_ms = 0;
  double crc32c_three_streams_ms = 0;
};

// ms a call of `crc` over `bytes`, best of a few rounds of 50 (one flipped
// byte a call, so that nothing is hoisted out of the loop).
template <typename Crc>
double TimeCrc(std::string bytes, Crc crc) {
  double best = 1e9;
  uint32_t sink = 0;
  for (int round = 0; round < 5; ++round) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < 50; ++i) {
      bytes[size_t(i) % bytes.size()] ^= 1;
      sink += crc(bytes.data(), bytes.size());
    }
    best = std::min(best, 1e3 * Seconds(t0) / 50);
  }
  if (sink == 42) bytes.clear();  // keeps the loop
  return best;
}

absl::StatusOr<RoundTrip> TimeRoundTrip(const model::BackendConfig& config,
                                        std::span<const int64_t> weights, int threads,
                                        int64_t steps) {
  // One pool for every part, and the backend's idle: two pools' threads
  // would spin against each other on the same cores.
  base::ThreadPool pool(threads, "bench-trip");
  RECKON_ASSIGN_OR_RETURN(
      codec::FixedPointReplica replica,
      codec::FixedPointReplica::Create(config.shape.param_count(), config.fraction_bits));
  RECKON_RETURN_IF_ERROR(replica.Load(weights));
  // The dense self-check in the apply, on a replica of its own that takes
  // the same messages.
  codec::FixedPointReplica checked_replica = replica;
  // As the CPU backend lends its pool (HostThreads).
  const codec::ParallelFor parallel_for = [&](size_t n, const auto& fn) {
    pool.ParallelForBlocks(n, fn);
  };
  const codec::CodecOptions options = model::FilledCodecOptions(config);
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<codec::Codec> encoder, codec::MakeCodec(options));
  // A residual of a trained step's size: a few quanta a value, each step's
  // feedback leaving the remainder, as in training.
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> residual(config.shape.param_count());
  std::vector<float> gradient_step(residual.size());
  for (float& v : gradient_step) v = normal(rng);
  model::Emission emission;
  RoundTrip t;
  t.encode_in_pass = codec::DenseFeedbackPass::UsableFor(options);
  // The residual the encode in the writer's pass feeds back: the same
  // values as `residual`, step by step (checked at the end).
  std::vector<float> residual_in_pass(residual.size());
  model::Emission in_pass;
  // The residual's writer, as the optimizer writes it, on the pool: each
  // thread's chunk then sits in its own core's cache, as in a training
  // step; each block's largest magnitude taken as written, as
  // model::AccumulateDelta's.
  const auto write = [&](std::vector<float>& r, size_t begin, size_t end) {
    int32_t largest = 0;
    for (size_t k = begin; k < end; ++k) {
      r[k] += gradient_step[k];
      largest = std::max(largest, codec::ResidualMagnitudeBits(r[k]));
    }
    return static_cast<uint32_t>(largest);
  };
  for (int64_t i = -1; i < steps; ++i) {  // a warm-up run first, not counted
    if (i == 0) {
      const bool encode_in_pass = t.encode_in_pass;
      t = RoundTrip{};
      t.encode_in_pass = encode_in_pass;
    }
    std::atomic<uint32_t> bound{0};
    Clock::time_point t0 = Clock::now();
    pool.ParallelFor(residual.size(), [&](size_t begin, size_t end) {
      codec::RaiseResidualBound(bound, write(residual, begin, end));
    });
    t.writer_ms += 1e3 * Seconds(t0);
    t0 = Clock::now();
    RECKON_RETURN_IF_ERROR(codec::EncodeWithFeedback(*encoder, options, residual, &emission.encoded,
                                                     &emission.dense, parallel_for, bound.load()));
    t.encode_ms += 1e3 * Seconds(t0);
    if (t.encode_in_pass) {
      t0 = Clock::now();
      codec::DenseFeedbackPass pass(options, residual_in_pass, &in_pass.encoded);
      pool.ParallelFor(residual.size(), [&](size_t begin, size_t end) {
        codec::DenseFeedbackPass::Chunk chunk(pass, begin);
        for (size_t block = begin; block < end; block += codec::DenseFeedbackPass::kBlockValues) {
          const size_t block_end = std::min(end, block + codec::DenseFeedbackPass::kBlockValues);
          chunk.Encode(block_end - block, write(residual_in_pass, block, block_end));
        }
      });
      RECKON_RETURN_IF_ERROR(pass.Finish(&in_pass.dense, parallel_for));
      t.pass_ms += 1e3 * Seconds(t0);
    }
    t0 = Clock::now();
    RECKON_RETURN_IF_ERROR(
        codec::CheckQuantaUpdate(emission.encoded, emission.quanta(), parallel_for));
    t.check_ms += 1e3 * Seconds(t0);
    t0 = Clock::now();
    RECKON_RETURN_IF_ERROR(replica.ApplyDense(emission.quanta(), parallel_for));
    t.apply_ms += 1e3 * Seconds(t0);
    if (emission.quanta().is_dense_fp32()) {
      t.check_in_apply = true;
      t0 = Clock::now();
      RECKON_RETURN_IF_ERROR(
          codec::CheckAndApplyDenseUpdate(emission.encoded, &checked_replica, parallel_for));
      t.checked_apply_ms += 1e3 * Seconds(t0);
    }
  }
  if (t.check_in_apply && checked_replica.WeightHash() != replica.WeightHash()) {
    return absl::InternalError("the self-check in the apply left another replica");
  }
  t.apply_bytes_per_param = (emission.quanta().is_dense_fp32() ? 4 : 8) + 8 + 8 + 4;
  t.encode_ms /= double(steps);
  t.writer_ms /= double(steps);
  t.pass_ms /= double(steps);
  if (t.encode_in_pass &&
      (in_pass.encoded.SerializeAsString() != emission.encoded.SerializeAsString() ||
       std::memcmp(residual_in_pass.data(), residual.data(), 4 * residual.size()) != 0)) {
    return absl::InternalError("the encode in the writer's pass gave another message or residual");
  }
  t.check_ms /= double(steps);
  t.apply_ms /= double(steps);
  t.checked_apply_ms /= double(steps);
  const std::string& payload = emission.encoded.payload();
  t.payload_bytes = payload.size();
  if (!payload.empty()) {
    t.crc32c_ms = TimeCrc(payload, [](const char* p, size_t n) { return codec::Crc32c(p, n); });
    if (codec::Crc32cHardwareAvailable()) {
      t.crc32c_three_streams_ms =
          TimeCrc(payload, [](const char* p, size_t n) { return codec::Crc32cHardware(p, n); });
    }
  }
  return t;
}

}  // namespace

int RunBenchTrain(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl bench train",
                              {{"layers"},
                               {"batch"},
                               {"steps", "200"},
                               {"codec"},
                               {"threshold", "0.005"},
                               {"threads"},
                               {"json"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  const std::string layers = absl::GetFlag(FLAGS_layers), codec = absl::GetFlag(FLAGS_codec);
  const int64_t batch = absl::GetFlag(FLAGS_batch), steps = absl::GetFlag(FLAGS_steps),
                threads = absl::GetFlag(FLAGS_threads);
  const double threshold = absl::GetFlag(FLAGS_threshold);
  const bool json = absl::GetFlag(FLAGS_json);

  model::BackendConfig config;
  absl::StatusOr<model::ModelShape> shape = model::ModelShape::Parse(layers, "relu");
  absl::StatusOr<v1::Codec> wire_codec = codec::CodecFromFlagName(codec);
  if (!shape.ok() || !wire_codec.ok() || batch < 1 || steps < 1) {
    err << "reckonctl bench train: "
        << (!shape.ok()        ? std::string(shape.status().message())
            : !wire_codec.ok() ? std::string(wire_codec.status().message())
                               : "--batch and --steps must be >= 1")
        << "\n";
    return kExitUsage;
  }
  config.shape = *shape;
  config.max_batch = static_cast<int>(batch);
  config.threads = static_cast<int>(threads);
  config.mode = *wire_codec == v1::CODEC_THRESHOLD_RICE ? model::UpdateMode::kThreshold
                                                        : model::UpdateMode::kCodec;
  config.codec.codec = *wire_codec;
  config.step = *codec::MakeThresholdStep(threshold, 32);
  config.optimizer.learning_rate = 0.01;
  absl::StatusOr<std::unique_ptr<model::Backend>> backend = cpu::MakeCpuBackend(config);
  if (!backend.ok()) {
    err << "reckonctl bench train: " << backend.status().message() << "\n";
    return kExitFailed;
  }
  codec::FixedPointReplica init = *codec::FixedPointReplica::Create(shape->param_count(), 32);
  if (absl::Status s = model::InitializeModel(*shape, 1, &init); !s.ok()) {
    err << "reckonctl bench train: " << s.message() << "\n";
    return kExitFailed;
  }
  if (absl::Status s = (*backend)->LoadWeights(init.quanta()); !s.ok()) {
    err << "reckonctl bench train: " << s.message() << "\n";
    return kExitFailed;
  }

  // Random standardized inputs: the arithmetic is the same as on real data.
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(batch) * shape->inputs());
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> labels(batch);
  for (int32_t& l : labels) l = static_cast<int32_t>(rng() % shape->classes());

  // GEMM multiply-adds per step: forward, weight gradient, and input
  // gradient for every layer but the first (the step skips that one).
  uint64_t macs = 0;
  for (size_t l = 0; l < shape->layers().size(); ++l) {
    const uint64_t m = uint64_t(batch) * shape->layers()[l].in * shape->layers()[l].out;
    macs += (l == 0 ? 2 : 3) * m;
  }
  const double flops_per_step = 2.0 * double(macs);

  // A failed step would make the timing meaningless: the first error stops
  // the benchmark and is reported.
  model::Emission emission;
  absl::Status step_status;
  auto step_once = [&] {
    if (!step_status.ok()) return;
    absl::StatusOr<model::BatchStats> s =
        (*backend)->TrainStep(x.data(), labels.data(), static_cast<int>(batch), 0.01f, &emission);
    if (!s.ok()) {
      step_status = s.status();
    } else if (config.mode == model::UpdateMode::kThreshold) {
      step_status = (*backend)->ApplyUpdates(config.step.step_quanta, emission.words);
    } else if (emission.quanta().is_dense_fp32()) {
      step_status = (*backend)->ApplyCheckedDense(emission.encoded);  // as the publisher does
    } else {
      step_status = (*backend)->ApplyDense(emission.quanta());
    }
  };
  for (int i = 0; i < 5; ++i) step_once();  // warm-up
  auto t0 = Clock::now();
  for (int64_t i = 0; i < steps; ++i) step_once();
  const double train_s = Seconds(t0);
  if (!step_status.ok()) {
    err << "reckonctl bench train: a training step failed: " << step_status.message() << "\n";
    return kExitFailed;
  }

  // The same GEMMs, alone, on buffers of the same sizes, with OpenBLAS's
  // own threading over all cores (the backend turned it off for itself).
  const int cores = threads > 0
                        ? static_cast<int>(threads)
                        : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  openblas_set_num_threads(cores);
  std::vector<std::vector<float>> a(shape->layers().size() + 1), w(shape->layers().size()),
      gw(shape->layers().size());
  a[0] = x;
  for (size_t l = 0; l < shape->layers().size(); ++l) {
    const auto& L = shape->layers()[l];
    a[l + 1].assign(size_t(batch) * L.out, 0.5f);
    w[l].assign(size_t(L.in) * L.out, 0.01f);
    gw[l].assign(size_t(L.in) * L.out, 0.0f);
  }
  size_t widest = 0;
  for (const auto& L : shape->layers()) widest = std::max<size_t>(widest, size_t(batch) * L.in);
  std::vector<float> da(widest);
  auto gemms_once = [&] {
    for (size_t l = 0; l < shape->layers().size(); ++l) {
      const auto& L = shape->layers()[l];
      const int B = static_cast<int>(batch);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, L.out, L.in, 1, a[l].data(), L.in,
                  w[l].data(), L.in, 1, a[l + 1].data(), L.out);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L.out, L.in, B, 1, a[l + 1].data(),
                  L.out, a[l].data(), L.in, 0, gw[l].data(), L.in);
      if (l > 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, L.in, L.out, 1, a[l + 1].data(),
                    L.out, w[l].data(), L.in, 0, da.data(), L.in);
      }
    }
  };
  for (int i = 0; i < 5; ++i) gemms_once();
  t0 = Clock::now();
  for (int64_t i = 0; i < steps; ++i) gemms_once();
  const double gemm_s = Seconds(t0);

  // The running replica check (docs/gossip.md "Divergence detection"): one
  // scan of the weights per check, one pass over each message's words.
  const codec::WeightChecksum checksum(1);
  uint64_t sink = 0;
  constexpr int kChecks = 20;
  t0 = Clock::now();
  for (int i = 0; i < kChecks; ++i) {
    absl::StatusOr<uint64_t> measured = (*backend)->Checksum(checksum);
    if (!measured.ok()) {
      err << "reckonctl bench train: " << measured.status().message() << "\n";
      return 1;
    }
    sink += *measured;
  }
  const double check_ms = 1e3 * Seconds(t0) / kChecks;
  constexpr int kContributions = 200;
  t0 = Clock::now();
  for (int i = 0; i < kContributions; ++i) {
    sink += checksum.OfUpdate(config.step.step_quanta, emission.words);
  }
  const double contribution_us = 1e6 * Seconds(t0) / kContributions;
  // Signed updates (mutual TLS): the origin signs each message once, every
  // receiver verifies it once, Ed25519 through OpenSSL.
  const server::KeyAndCertificate ca = *server::MakeCertificateAuthority("bench CA", 1);
  const server::KeyAndCertificate member = *server::IssueCertificate(ca, "w0", {}, 1);
  std::unique_ptr<server::UpdateSigner> signer = *server::UpdateSigner::Create(member.key_pem);
  server::CertificateBook book(ca.cert_pem);
  (void)book.Add(member.cert_pem);
  v1::Update message;
  message.mutable_origin()->set_node_id("w0");
  message.set_seq(1);
  (void)codec::EncodeThresholdUpdate(emission.words, config.step.step_quanta, shape->param_count(),
                                     v1::CODEC_THRESHOLD_RICE, &message);
  constexpr int kSignatures = 500;
  t0 = Clock::now();
  for (int i = 0; i < kSignatures; ++i) {
    message.set_seq(i + 1);
    signer->Sign(&message);
  }
  const double sign_us = 1e6 * Seconds(t0) / kSignatures;
  t0 = Clock::now();
  for (int i = 0; i < kSignatures; ++i) sink += book.Verify(message).ok();
  const double verify_us = 1e6 * Seconds(t0) / kSignatures;
  if (sink == 42) out << "";  // keeps the loops
  const double step_ms = 1e3 * train_s / steps;
  RoundTrip trip;
  if (config.mode == model::UpdateMode::kCodec) {
    absl::StatusOr<RoundTrip> timed = TimeRoundTrip(config, init.quanta(), cores, steps);
    if (!timed.ok()) {
      err << "reckonctl bench train: the round trip: " << timed.status().message() << "\n";
      return kExitFailed;
    }
    trip = *timed;
  }
  // The training step timed above holds the encode and the apply, and a
  // dense emission's self-check in it; another codec's self-check is a
  // walk of its own that the worker's step holds too.
  const double trip_share =
      trip.total_ms() / (step_ms + (trip.check_in_apply ? 0.0 : trip.check_ms));
  // At the default interval (2 s): the share of the time spent checking.
  const double check_share = check_ms / 2000.0;

  const double train_flops = flops_per_step * steps / train_s;
  const double gemm_flops = flops_per_step * steps / gemm_s;
  if (json) {
    const base::Json figures = {{"layers", layers},
                                {"batch", batch},
                                {"codec", codec},
                                {"steps", steps},
                                {"threads", cores},
                                {"train_flops_per_s", train_flops},
                                {"sgemm_flops_per_s", gemm_flops},
                                {"ratio", train_flops / gemm_flops},
                                {"step_ms", step_ms},
                                {"gemm_ms", 1e3 * gemm_s / steps},
                                {"check_ms", check_ms},
                                {"check_share", check_share},
                                {"contribution_us", contribution_us},
                                {"updates_per_message", emission.words.size()},
                                {"sign_us", sign_us},
                                {"verify_us", verify_us},
                                {"round_trip_encode_ms", trip.encode_ms},
                                {"round_trip_encode_in_pass_ms", trip.in_pass_encode_ms()},
                                {"round_trip_writer_ms", trip.writer_ms},
                                {"round_trip_pass_ms", trip.pass_ms},
                                {"round_trip_check_ms", trip.check_ms},
                                {"round_trip_apply_ms", trip.apply_ms},
                                {"round_trip_checked_apply_ms", trip.checked_apply_ms},
                                {"round_trip_share", trip_share},
                                {"payload_bytes", trip.payload_bytes},
                                {"crc32c_ms", trip.crc32c_ms},
                                {"crc32c_three_streams_ms", trip.crc32c_three_streams_ms},
                                {"crc32c_folded", codec::Crc32cFoldedAvailable()},
                                {"crc32c_implementation", codec::Crc32cImplementation()},
                                {"elementwise_copy", codec::ElementwiseCopy(codec::Isa::kBest)},
                                {"cpu_isa", codec::IsaCeilingName()}};
    out << figures.dump() << "\n";
  } else {
    out << absl::StrFormat(
        "reckonctl bench train: %s, batch %d, %s, %d steps, %d threads\n"
        "  training step   %.3f ms  %.3g FLOP/s\n"
        "  sgemm alone     %.3f ms  %.3g FLOP/s (same shapes)\n"
        "  ratio           %.2fx  (target >= 0.6x)  %s\n"
        "  replica check   %.3f ms per check of %d parameters: %.3f%% of the time at the "
        "2 s interval (%.4f ms per step)\n"
        "  checksum delta  %.2f us per message of %d updates (%.4f%% of a step)\n"
        "  signed updates  sign %.1f us, verify %.1f us per message (Ed25519, OpenSSL): "
        "%.2f%% and %.2f%% of a step\n",
        layers, batch, codec, steps, cores, step_ms, train_flops, 1e3 * gemm_s / steps, gemm_flops,
        train_flops / gemm_flops, train_flops / gemm_flops >= 0.6 ? "ok" : "MISSED", check_ms,
        shape->param_count(), 100 * check_share, check_share * step_ms, contribution_us,
        emission.words.size(), 100 * contribution_us / (1e3 * step_ms), sign_us, verify_us,
        100 * sign_us / (1e3 * step_ms), 100 * verify_us / (1e3 * step_ms));
    if (config.mode == model::UpdateMode::kCodec) {
      const double apply_gb_per_s =
          trip.apply_bytes_per_param * double(shape->param_count()) / (1e-3 * trip.apply_ms) / 1e9;
      if (trip.check_in_apply) {
        out << absl::StrFormat(
            "  round trip      %.3f ms a step: encode and feedback %.3f, self-check in the "
            "apply %.3f\n"
            "                  in two walks: self-check %.3f, apply %.3f (%.1f GB/s)\n",
            trip.total_ms(), trip.round_trip_encode_ms(), trip.checked_apply_ms, trip.check_ms,
            trip.apply_ms, apply_gb_per_s);
      } else {
        out << absl::StrFormat(
            "  round trip      %.3f ms a step: encode and feedback %.3f, self-check %.3f, "
            "apply %.3f (%.1f GB/s)\n",
            trip.total_ms(), trip.round_trip_encode_ms(), trip.check_ms, trip.apply_ms,
            apply_gb_per_s);
      }
      if (trip.encode_in_pass) {
        out << absl::StrFormat(
            "                  the encode in the optimizer's pass: %.3f beyond the writer's "
            "%.3f; in a pass of its own %.3f\n",
            trip.in_pass_encode_ms(), trip.writer_ms, trip.encode_ms);
      }
      out << absl::StrFormat("                  %.1f%% of the worker's step (target <= 10%%)  %s\n",
                             100 * trip_share, trip_share <= 0.10 ? "ok" : "MISSED");
      out << absl::StrFormat(
          "  payload CRC     %.3f ms for %d bytes on one thread (%s); the crc32 "
          "instruction's three streams %.3f ms\n"
          "  passes          the %s copies of the elementwise passes (RECKON_CPU_ISA: %s)\n",
          trip.crc32c_ms, trip.payload_bytes, codec::Crc32cImplementation(),
          trip.crc32c_three_streams_ms, codec::ElementwiseCopy(codec::Isa::kBest),
          codec::IsaCeilingName());
    }
  }
  return kExitOk;
}

}  // namespace reckon::ctl
