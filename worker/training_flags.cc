// reckon-worker's training flags (model, optimizer, schedule, data,
// compression, compute, output), read once into TrainerOptions.
#include "worker/training_flags.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/exit_codes.h"
#include "base/files.h"
#include "base/flags.h"
#include "base/status_macros.h"
#include "codec/codec.h"
#include "server/cluster_config.h"
#include "server/grpc_transport.h"
#include "server/lanes.h"
#include "server/node.h"
#include "server/snapshot_cuts.h"
#include "worker/backend_factory.h"
#include "worker/data_identity.h"
#include "worker/gossip_peers.h"
#include "worker/recipes.h"
#include "worker/synthetic.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, data_dir, reckon::worker::kDefaultDataDir,
          "directory with the IDX files (train-*, t10k-*), gzip'd or not, or a NumPy dataset "
          "(train_x.npy, train_y.npy or their shards train_x-00000.npy, ...; test_x.npy, "
          "test_y.npy)");
ABSL_FLAG(bool, data_in_memory, false,
          "read a NumPy dataset whole into memory at the start; by default it is memory-mapped "
          "and read as the epochs ask for its rows, so a dataset larger than memory trains "
          "(IDX files are always read whole)");
ABSL_FLAG(std::string, layers, "784,512,512,10", "layer widths, input first");
ABSL_FLAG(std::string, activation, "relu", "hidden units: relu or sigmoid");
ABSL_FLAG(std::string, optimizer, "momentum", "sgd, momentum or adagrad");
ABSL_FLAG(double, lr, 0.02, "learning rate");
ABSL_FLAG(double, momentum, 0.9, "momentum coefficient (--optimizer momentum)");
ABSL_FLAG(double, weight_decay, 0, "L2 weight decay");
ABSL_FLAG(std::string, adagrad_placement, "local",
          "--optimizer adagrad: feed AdaGrad this worker's own gradient (local), or the "
          "cluster's aggregate as it arrives, own gradient plus the peers' quantized steps "
          "(aggregate; Seide 2014 section 4; docs/training.md)");
ABSL_FLAG(std::string, gemm_precision, "fp32",
          "the GEMMs' arithmetic: fp32 (default), or tf32 (--backend cuda: the tensor cores, "
          "10-bit mantissas in the products; docs/cuda.md)");
ABSL_FLAG(bool, match_momentum_to_cluster, true,
          "with peers: the N workers training share one worker's momentum (per-update "
          "momentum less the staleness of asynchrony, to the N-th power per own step, lr "
          "scaled to keep lr / (1 - momentum) per gradient, less where the cluster would be "
          "less stable than four workers on a fast link; docs/training.md)");
ABSL_FLAG(std::string, lr_schedule, "halve",
          "constant, or halve (every epoch after --halve-after, Strom's recipe)");
ABSL_FLAG(int32_t, halve_after, 6,
          "with --lr-schedule halve: keep the full rate for this many epochs, then halve");
ABSL_FLAG(int64_t, warmup_steps, 0, "linear learning-rate warm-up over this many steps");
ABSL_FLAG(int32_t, warmup_batch, 0,
          "first-epoch ramp (Strom 2015 Table 1): the first --warmup-fraction of the first "
          "epoch in minibatches of this size (0: none)");
ABSL_FLAG(double, warmup_fraction, 1.0 / 6,
          "the share of the first epoch that --warmup-batch covers (Strom: 1/6)");
ABSL_FLAG(std::string, recipe, "",
          "a named recipe, replaced where it stands by its flags (flags after it win): default, "
          "or strom2015 (Strom 2015: five sigmoid layers of 1,800, layer-wise pre-training, the "
          "first-epoch ramp, the rate halved every epoch after the sixth; docs/training.md "
          "\"Recipes\")");
ABSL_FLAG(int64_t, pretrain_samples, 0,
          "supervised layer-wise pre-training (Strom 2015 section 3.3): grow the network one "
          "hidden layer at a time, each stage one pass over this many samples of the shard, "
          "before the first step (0: none). With peers the worker of shard 0 pre-trains and "
          "publishes the start; the others join from it (docs/training.md)");
ABSL_FLAG(int32_t, start_workers, 0,
          "with peers: only the workers of shards 0 to N-1 train the first-epoch warm-up "
          "(--warmup-fraction, in minibatches of --warmup-batch); the others join once the "
          "cluster has, and train without the ramp (Strom 2015 Table 1). 0: all start");
ABSL_FLAG(int32_t, epochs, 10, "epochs over this worker's shard");
ABSL_FLAG(int32_t, batch, 100, "minibatch size (and the size --lr is given for)");
ABSL_FLAG(std::string, auto_batch, "",
          "automatic minibatch-size selection (Seide 2014): candidate sizes, e.g. 100,200,400; "
          "at the start of every --auto-batch-every-th epoch each is tried on the next "
          "--auto-batch-samples samples and the largest within --auto-batch-tolerance of the "
          "best training accuracy is kept (docs/training.md)");
ABSL_FLAG(double, auto_batch_lr_power, 0,
          "--auto-batch: a batch of b uses lr x (b / --batch)^this: 1 keeps the rate per "
          "sample, 0.5 scales it with the square root, 0 keeps the rate per step");
ABSL_FLAG(int32_t, auto_batch_every, 1, "--auto-batch: select every this many epochs");
ABSL_FLAG(int64_t, auto_batch_samples, 2000,
          "--auto-batch: samples each candidate trains on (a cost of candidates x this per "
          "selection)");
ABSL_FLAG(int64_t, auto_batch_eval, 2000,
          "--auto-batch: fixed training samples whose accuracy judges the candidates");
ABSL_FLAG(double, auto_batch_tolerance, 0.5,
          "--auto-batch: accuracy points a larger batch may lose to the best and still be kept");
ABSL_FLAG(int64_t, max_steps, 0, "stop after this many steps (0: no limit)");
ABSL_FLAG(int64_t, eval_samples, 0, "test samples per evaluation (0: all)");
ABSL_FLAG(uint64_t, seed, 1, "cluster seed: initial weights, shards, shuffles");
ABSL_FLAG(std::string, shard, "0/1", "i/n: train on the i-th of n disjoint data shards");
ABSL_FLAG(std::string, codec, "threshold",
          "threshold (Strom 2015), onebit (Seide 2014), dyntree8 (Dettmers 2015) or dense "
          "(fp32 baseline); docs/wire-codecs.md");
ABSL_FLAG(bool, error_feedback, true,
          "onebit, dyntree8, dense: carry each step's quantization error to the next");
ABSL_FLAG(int32_t, absmax_every, 1,
          "dyntree8: recompute each tensor's absolute maximum every K steps");
ABSL_FLAG(double, threshold, 0.01, "tau for --codec threshold (rounded to the grid)");
ABSL_FLAG(double, target_density, 0,
          "steer tau so each step emits about this fraction of the parameters (0: fixed tau)");
ABSL_FLAG(std::string, wire_format, "rice", "threshold message payload: rice or packed32");
ABSL_FLAG(int32_t, fraction_bits, 32, "fixed-point fraction bits (cluster-wide)");
ABSL_FLAG(std::string, backend, "auto", "auto, cpu or cuda");
ABSL_FLAG(int32_t, threads, 0, "CPU threads (0: all cores)");
ABSL_FLAG(std::string, checkpoint, "", "save a checkpoint here after every epoch");
ABSL_FLAG(std::string, resume, "", "resume from this checkpoint");
ABSL_FLAG(std::string, progress, "auto", "live progress bar: auto (when a terminal), on, off");
// Test-only faults (the failure tests).
ABSL_FLAG(uint64_t, fault_corrupt_weight_at_step, 0,
          "TEST ONLY: before this step, add one quantum to one weight of the training replica "
          "(a memory fault the replica check must catch, the worker then re-joining from a peer)");
ABSL_FLAG(int32_t, fault_slow_step_ms, 0,
          "TEST ONLY: no training step starts sooner than this many milliseconds after the one "
          "before (a slow device: a floor on how long a run lasts)");

namespace reckon::worker {
namespace {

using namespace reckon::model;  // NOLINT: the flags name the model's options

// --layers, --activation and the optimizer's flags.
absl::Status ModelFromFlags(TrainerOptions* options) {
  TrainerOptions& o = *options;
  BackendConfig& b = o.backend_config;
  RECKON_ASSIGN_OR_RETURN(
      b.shape, ModelShape::Parse(absl::GetFlag(FLAGS_layers), absl::GetFlag(FLAGS_activation)));
  RECKON_ASSIGN_OR_RETURN(b.optimizer.kind, ParseOptimizer(absl::GetFlag(FLAGS_optimizer)));
  b.optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  b.optimizer.momentum = absl::GetFlag(FLAGS_momentum);
  b.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  RECKON_ASSIGN_OR_RETURN(b.optimizer.adagrad_placement,
                          ParseAdagradPlacement(absl::GetFlag(FLAGS_adagrad_placement)));
  if (b.optimizer.adagrad_placement != AdagradPlacement::kLocal &&
      b.optimizer.kind != OptimizerKind::kAdagrad) {
    return absl::InvalidArgumentError(
        "--adagrad-placement aggregate needs --optimizer adagrad (it says where AdaGrad's "
        "accumulator is fed from)");
  }
  RECKON_ASSIGN_OR_RETURN(b.gemm_precision,
                          ParseGemmPrecision(absl::GetFlag(FLAGS_gemm_precision)));
  o.match_momentum_to_cluster = absl::GetFlag(FLAGS_match_momentum_to_cluster);
  if (!(b.optimizer.weight_decay >= 0)) {
    return absl::InvalidArgumentError("--weight-decay must be >= 0");
  }
  if (!(b.optimizer.learning_rate > 0) ||
      !(b.optimizer.momentum >= 0 && b.optimizer.momentum < 1)) {
    return absl::InvalidArgumentError("--lr must be > 0 and --momentum in [0, 1)");
  }
  RECKON_ASSIGN_OR_RETURN(b.optimizer.schedule, ParseSchedule(absl::GetFlag(FLAGS_lr_schedule)));
  b.optimizer.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  b.optimizer.halve_after = absl::GetFlag(FLAGS_halve_after);
  if (b.optimizer.halve_after < 0 || b.optimizer.warmup_steps < 0) {
    return absl::InvalidArgumentError("--halve-after and --warmup-steps must be >= 0");
  }
  return absl::OkStatus();
}

// --codec, --error-feedback, --absmax-every, --threshold, --target-density,
// --wire-format, --fraction-bits.
absl::Status CodecFromFlags(TrainerOptions* options) {
  TrainerOptions& o = *options;
  BackendConfig& b = o.backend_config;
  b.fraction_bits = absl::GetFlag(FLAGS_fraction_bits);
  RECKON_ASSIGN_OR_RETURN(const reckon::v1::Codec codec,
                          reckon::codec::CodecFromFlagName(absl::GetFlag(FLAGS_codec)));
  if (codec != reckon::v1::CODEC_THRESHOLD_RICE) {
    b.mode = UpdateMode::kCodec;
    b.codec.codec = codec;
    b.codec.error_feedback = absl::GetFlag(FLAGS_error_feedback);
    b.codec.absmax_every = absl::GetFlag(FLAGS_absmax_every);
    if (b.codec.absmax_every < 1) return absl::InvalidArgumentError("--absmax-every must be >= 1");
    o.wire_codec = codec;
    return absl::OkStatus();
  }
  b.mode = UpdateMode::kThreshold;
  o.threshold = absl::GetFlag(FLAGS_threshold);
  o.target_density = absl::GetFlag(FLAGS_target_density);
  if (!(o.target_density >= 0 && o.target_density < 1)) {
    return absl::InvalidArgumentError("--target-density must be in [0, 1)");
  }
  RECKON_ASSIGN_OR_RETURN(b.step, reckon::codec::MakeThresholdStep(o.threshold, b.fraction_bits));
  const std::string format = absl::GetFlag(FLAGS_wire_format);
  if (format == "rice") {
    o.wire_codec = reckon::v1::CODEC_THRESHOLD_RICE;
  } else if (format == "packed32") {
    o.wire_codec = reckon::v1::CODEC_THRESHOLD_PACKED32;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--wire-format '", format, "' is not rice or packed32"));
  }
  return absl::OkStatus();
}

// --auto-batch "100,200,400": ascending sizes, or empty (off).
absl::StatusOr<std::vector<int>> ParseBatchCandidates(const std::string& text) {
  std::vector<int> sizes;
  if (text.empty()) return sizes;
  for (const absl::string_view part : absl::StrSplit(text, ',')) {
    int size = 0;
    if (!absl::SimpleAtoi(part, &size) || size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auto-batch '", text, "': '", part, "' is not a batch size >= 1"));
    }
    if (!sizes.empty() && size <= sizes.back()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auto-batch '", text, "': the sizes must be strictly ascending"));
    }
    sizes.push_back(size);
  }
  return sizes;
}

}  // namespace

absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags() {
  TrainerOptions o;
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.data_in_memory = absl::GetFlag(FLAGS_data_in_memory);
  RECKON_RETURN_IF_ERROR(ParseShard(absl::GetFlag(FLAGS_shard), &o.shard, &o.shards));
  o.seed = absl::GetFlag(FLAGS_seed);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.warmup_batch = absl::GetFlag(FLAGS_warmup_batch);
  o.warmup_fraction = absl::GetFlag(FLAGS_warmup_fraction);
  o.pretrain_samples = absl::GetFlag(FLAGS_pretrain_samples);
  o.start_workers = absl::GetFlag(FLAGS_start_workers);
  if (o.start_workers < 0 || o.start_workers > o.shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--start-workers ", o.start_workers, " must be from 0 (all) to the shards' ", o.shards));
  }
  if (o.pretrain_samples < 0) return absl::InvalidArgumentError("--pretrain-samples must be >= 0");
  RECKON_RETURN_IF_ERROR(CheckWarmupBatchOptions(o));
  RECKON_ASSIGN_OR_RETURN(o.auto_batch, ParseBatchCandidates(absl::GetFlag(FLAGS_auto_batch)));
  o.auto_batch_every = absl::GetFlag(FLAGS_auto_batch_every);
  o.auto_batch_lr_power = absl::GetFlag(FLAGS_auto_batch_lr_power);
  o.auto_batch_samples = absl::GetFlag(FLAGS_auto_batch_samples);
  o.auto_batch_eval = absl::GetFlag(FLAGS_auto_batch_eval);
  o.auto_batch_tolerance = absl::GetFlag(FLAGS_auto_batch_tolerance) / 100;
  RECKON_RETURN_IF_ERROR(CheckAutoBatchOptions(o));
  o.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.eval_samples = absl::GetFlag(FLAGS_eval_samples);
  o.backend = absl::GetFlag(FLAGS_backend);
  RECKON_RETURN_IF_ERROR(CheckBackendName(o.backend));
  o.checkpoint_path = absl::GetFlag(FLAGS_checkpoint);
  o.fault_corrupt_weight_at_step = absl::GetFlag(FLAGS_fault_corrupt_weight_at_step);
  o.fault_slow_step_ms = absl::GetFlag(FLAGS_fault_slow_step_ms);
  if (o.fault_slow_step_ms < 0 || o.fault_slow_step_ms > 60000) {
    return absl::InvalidArgumentError(absl::StrCat("--fault-slow-step-ms is ", o.fault_slow_step_ms,
                                                   ": 0 to 60000 (a minute) only"));
  }
  o.resume_path = absl::GetFlag(FLAGS_resume);
  const std::string progress = absl::GetFlag(FLAGS_progress);
  if (progress != "auto" && progress != "on" && progress != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("--progress '", progress, "' is not auto, on or off"));
  }
  o.progress_bar = progress == "on" || (progress == "auto" && ::isatty(STDOUT_FILENO));
  if (o.epochs < 0 || o.batch < 1 || o.max_steps < 0 || o.eval_samples < 0) {
    return absl::InvalidArgumentError(
        "--epochs, --max-steps and --eval-samples must be >= 0 and --batch >= 1");
  }

  RECKON_RETURN_IF_ERROR(ModelFromFlags(&o));
  if (o.pretrain_samples > 0 && o.backend_config.shape.layers().size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("--pretrain-samples: the model ",
                                                   o.backend_config.shape.ToString(),
                                                   " has no hidden layer to pre-train"));
  }
  o.backend_config.threads = absl::GetFlag(FLAGS_threads);
  RECKON_RETURN_IF_ERROR(CodecFromFlags(&o));
  return o;
}

}  // namespace reckon::worker
