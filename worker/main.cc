// reckon-worker: one training worker. `--standalone` trains alone; the gossip
// node (peers) comes with the next issue. Flags are read here, once, into an
// options struct; nothing below main() reads a flag.
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "worker/files.h"
#include "absl/strings/str_format.h"
#include "worker/trainer.h"

ABSL_FLAG(bool, standalone, false, "train alone, with no peers");
ABSL_FLAG(std::string, data_dir, reckon::worker::kDefaultDataDir,
          "directory with the IDX files (train-*, t10k-*), gzip'd or not");
ABSL_FLAG(std::string, layers, "784,512,512,10", "layer widths, input first");
ABSL_FLAG(std::string, activation, "relu", "hidden units: relu or sigmoid");
ABSL_FLAG(std::string, optimizer, "momentum", "sgd, momentum or adagrad");
ABSL_FLAG(double, lr, 0.02, "learning rate");
ABSL_FLAG(double, momentum, 0.9, "momentum coefficient (--optimizer momentum)");
ABSL_FLAG(double, weight_decay, 0, "L2 weight decay");
ABSL_FLAG(std::string, lr_schedule, "halve",
          "constant, or halve (every epoch after --halve_after, Strom's recipe)");
ABSL_FLAG(int32_t, halve_after, 6,
          "with --lr_schedule halve: keep the full rate for this many epochs, then halve");
ABSL_FLAG(int64_t, warmup_steps, 0, "linear learning-rate warm-up over this many steps");
ABSL_FLAG(int32_t, epochs, 10, "epochs over this worker's shard");
ABSL_FLAG(int32_t, batch, 100, "minibatch size");
ABSL_FLAG(int64_t, max_steps, 0, "stop after this many steps (0: no limit)");
ABSL_FLAG(int64_t, eval_samples, 0, "test samples per evaluation (0: all)");
ABSL_FLAG(uint64_t, seed, 1, "cluster seed: initial weights, shards, shuffles");
ABSL_FLAG(std::string, shard, "0/1", "i/n: train on the i-th of n disjoint data shards");
ABSL_FLAG(std::string, codec, "threshold", "dense (full delta each step) or threshold (Strom)");
ABSL_FLAG(double, threshold, 0.01, "tau for --codec threshold (rounded to the grid)");
ABSL_FLAG(double, target_density, 0,
          "steer tau so each step emits about this fraction of the parameters (0: fixed tau)");
ABSL_FLAG(std::string, wire_format, "rice", "threshold message payload: rice or packed32");
ABSL_FLAG(int32_t, fraction_bits, 32, "fixed-point fraction bits (cluster-wide)");
ABSL_FLAG(std::string, backend, "auto", "auto, cpu or cuda");
ABSL_FLAG(int32_t, threads, 0, "CPU threads (0: all cores)");
ABSL_FLAG(std::string, checkpoint, "", "save a checkpoint here after every epoch");
ABSL_FLAG(std::string, resume, "", "resume from this checkpoint");
ABSL_FLAG(std::string, summary_json, "", "write the run's summary here as JSON");
ABSL_FLAG(std::string, progress, "auto", "live progress bar: auto (when a terminal), on, off");

namespace {

using namespace reckon::worker;  // NOLINT: main's own translation unit

int UsageError(const absl::Status& s) {
  std::cerr << "reckon-worker: " << s.message() << "\n";
  return 2;
}

absl::StatusOr<TrainerOptions> OptionsFromFlags() {
  TrainerOptions o;
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  absl::Status s = ParseShard(absl::GetFlag(FLAGS_shard), &o.shard, &o.shards);
  if (!s.ok()) return s;
  o.seed = absl::GetFlag(FLAGS_seed);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.eval_samples = absl::GetFlag(FLAGS_eval_samples);
  o.backend = absl::GetFlag(FLAGS_backend);
  if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend '", o.backend, "' is not auto, cpu or cuda"));
  }
  o.checkpoint_path = absl::GetFlag(FLAGS_checkpoint);
  o.resume_path = absl::GetFlag(FLAGS_resume);
  const std::string progress = absl::GetFlag(FLAGS_progress);
  if (progress != "auto" && progress != "on" && progress != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--progress '", progress, "' is not auto, on or off"));
  }
  o.progress_bar = progress == "on" || (progress == "auto" && ::isatty(STDOUT_FILENO));
  if (o.epochs < 0 || o.batch < 1 || o.max_steps < 0 || o.eval_samples < 0) {
    return absl::InvalidArgumentError(
        "--epochs, --max_steps and --eval_samples must be >= 0 and --batch >= 1");
  }

  BackendConfig& b = o.backend_config;
  absl::StatusOr<ModelShape> shape =
      ModelShape::Parse(absl::GetFlag(FLAGS_layers), absl::GetFlag(FLAGS_activation));
  if (!shape.ok()) return shape.status();
  b.shape = *shape;
  absl::StatusOr<OptimizerKind> kind = ParseOptimizer(absl::GetFlag(FLAGS_optimizer));
  if (!kind.ok()) return kind.status();
  b.optimizer.kind = *kind;
  b.optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  b.optimizer.momentum = absl::GetFlag(FLAGS_momentum);
  b.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  if (!(b.optimizer.weight_decay >= 0)) {
    return absl::InvalidArgumentError("--weight_decay must be >= 0");
  }
  if (!(b.optimizer.learning_rate > 0) || !(b.optimizer.momentum >= 0 && b.optimizer.momentum < 1)) {
    return absl::InvalidArgumentError("--lr must be > 0 and --momentum in [0, 1)");
  }
  absl::StatusOr<Schedule> schedule = ParseSchedule(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule.ok()) return schedule.status();
  b.optimizer.schedule = *schedule;
  b.optimizer.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  b.optimizer.halve_after = absl::GetFlag(FLAGS_halve_after);
  if (b.optimizer.halve_after < 0 || b.optimizer.warmup_steps < 0) {
    return absl::InvalidArgumentError("--halve_after and --warmup_steps must be >= 0");
  }
  b.fraction_bits = absl::GetFlag(FLAGS_fraction_bits);
  b.threads = absl::GetFlag(FLAGS_threads);
  const std::string codec = absl::GetFlag(FLAGS_codec);
  if (codec == "dense") {
    b.mode = UpdateMode::kDense;
  } else if (codec == "threshold") {
    b.mode = UpdateMode::kThreshold;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--codec '", codec, "' is not dense or threshold"));
  }
  o.threshold = absl::GetFlag(FLAGS_threshold);
  o.target_density = absl::GetFlag(FLAGS_target_density);
  if (!(o.target_density >= 0 && o.target_density < 1)) {
    return absl::InvalidArgumentError("--target_density must be in [0, 1)");
  }
  absl::StatusOr<reckon::codec::ThresholdStep> step =
      reckon::codec::MakeThresholdStep(o.threshold, b.fraction_bits);
  if (!step.ok()) return step.status();
  b.step = *step;
  const std::string format = absl::GetFlag(FLAGS_wire_format);
  if (format == "rice") {
    o.wire_codec = reckon::v1::CODEC_THRESHOLD_RICE;
  } else if (format == "packed32") {
    o.wire_codec = reckon::v1::CODEC_THRESHOLD_PACKED32;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--wire_format '", format, "' is not rice or packed32"));
  }
  return o;
}

// Flags may be written with dashes, as the docs do (--summary-json), or with
// underscores, as Abseil names them (--summary_json): the name part of every
// "--name[=value]" argument is normalized to underscores. Values are left as
// they are.
std::vector<std::string> NormalizeFlagNames(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a == "--") continue;
    const size_t end = std::min(a.find('='), a.size());
    std::replace(a.begin() + 2, a.begin() + static_cast<std::ptrdiff_t>(end), '-', '_');
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "trains one reckon worker.\n  reckon-worker --standalone [--layers 784,512,512,10] "
      "[--codec threshold --threshold T] [--epochs N] ...");
  std::vector<std::string> normalized = NormalizeFlagNames(argc, argv);
  std::vector<char*> normalized_argv;
  for (std::string& a : normalized) normalized_argv.push_back(a.data());
  const std::vector<char*> rest =
      absl::ParseCommandLine(static_cast<int>(normalized_argv.size()), normalized_argv.data());
  if (rest.size() > 1) {
    return UsageError(absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", rest[1], "' (flags start with --)")));
  }
  if (!absl::GetFlag(FLAGS_standalone)) {
    return UsageError(absl::InvalidArgumentError(
        "training with peers is not built yet; pass --standalone to train alone"));
  }
  absl::StatusOr<TrainerOptions> options = OptionsFromFlags();
  if (!options.ok()) return UsageError(options.status());
  absl::StatusOr<TrainSummary> summary = RunTraining(*options, std::cout);
  if (!summary.ok()) {
    std::cerr << "reckon-worker: " << summary.status().message() << "\n";
    return 1;
  }
  std::cout << absl::StrFormat(
      "done: %d steps, test accuracy %.2f%%, %.0f samples/s, %s, wire %d bytes vs dense %d "
      "(%.0fx), weights %s\n",
      summary->steps, 100 * summary->test_accuracy, summary->samples_per_s, summary->codec,
      summary->wire_bytes, summary->dense_bytes, summary->compression_ratio,
      summary->weight_hash.substr(0, 16));
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (!path.empty()) {
    absl::Status s = WriteFileAtomically(path, SummaryJson(*summary));
    if (!s.ok()) {
      std::cerr << "reckon-worker: " << s.message() << "\n";
      return 1;
    }
  }
  return 0;
}
