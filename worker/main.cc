// reckon-worker: one training worker. `--standalone` trains alone;
// `--node-id ID --listen ADDR --peers ...` trains with peers through the
// gossip node. Flags are read here, once, into options structs; nothing
// below main() reads a flag.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/allocator.h"
#include "base/files.h"
#include "base/flags.h"
#include "base/exit_codes.h"
#include "base/stop_signals.h"
#include "base/status_macros.h"
#include "codec/codec.h"
#include "server/grpc_transport.h"
#include "server/lanes.h"
#include "server/node.h"
#include "server/snapshot_cuts.h"
#include "worker/backend_factory.h"
#include "worker/data_identity.h"
#include "worker/gossip_peers.h"
#include "worker/observability.h"
#include "worker/recipes.h"
#include "worker/synthetic.h"
#include "worker/trainer.h"

ABSL_FLAG(bool, standalone, false, "train alone, with no peers");
ABSL_FLAG(bool, synthetic, false,
          "join the cluster without training: emit random +-tau messages of "
          "--synthetic-updates updates at --synthetic-rate per second (until --max-steps) and "
          "apply the peers' (measuring the gossip layer at sizes the machine cannot train; "
          "docs/scaling.md)");
ABSL_FLAG(int64_t, synthetic_updates, 1000, "--synthetic: +-tau updates per message");
ABSL_FLAG(double, synthetic_rate, 10, "--synthetic: messages per second (0: as fast as it can)");
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
          "scaled to keep lr / (1 - momentum) per gradient; docs/training.md)");
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
ABSL_FLAG(std::string, summary_json, "", "write the run's summary here as JSON");
ABSL_FLAG(std::string, progress, "auto", "live progress bar: auto (when a terminal), on, off");
ABSL_FLAG(std::string, http_listen, "0.0.0.0:9464",
          "address of /metrics, /healthz, /readyz and /status (port 0: any, logged; empty: none)");
ABSL_FLAG(std::string, after_training, "exit",
          "when training is over: exit (0), or serve: stay a member of the cluster with "
          "/metrics, /status and snapshots for late joiners until SIGTERM (Kubernetes "
          "StatefulSets, Compose services that restart)");
ABSL_FLAG(uint64_t, ready_max_behind, 1000,
          "/readyz: at most this many messages behind the most advanced peer");
// Peers (the gossip node).
ABSL_FLAG(std::string, node_id, "",
          "this worker's stable name, e.g. the pod name ([A-Za-z0-9._-])");
ABSL_FLAG(std::string, listen, "0.0.0.0:7070",
          "address the gossip service listens on (port 0: any)");
ABSL_FLAG(std::string, advertise, "",
          "host:port peers dial to reach this worker (default: --listen with this host's name)");
ABSL_FLAG(std::string, peers, "",
          "host:port,... of peers to join; a name may resolve to several (headless Service)");
ABSL_FLAG(bool, bootstrap, false,
          "start a new cluster from the seed's weights when no seed that answers has trained, "
          "even if some seeds do not answer (without it, only every seed saying so counts)");
ABSL_FLAG(bool, join_by_replay, true,
          "on a first join, start from the seed's weights and be sent a seed's cut by the "
          "members' logs when that is fewer bytes than its snapshot and the seeds started from "
          "the same weights (false: always load the snapshot)");
ABSL_FLAG(int32_t, join_timeout_s, 0,
          "give up joining (exit 1) when the seeds' answers are not conclusive after this long "
          "(0: keep probing)");
ABSL_FLAG(std::string, cluster_token, "", "shared secret every peer must present (optional)");
ABSL_FLAG(std::string, tls_cert, "",
          "mutual TLS: this worker's certificate (PEM, signed by --tls-ca, common name = "
          "--node-id, Ed25519 key); with --tls-key and --tls-ca");
ABSL_FLAG(std::string, tls_key, "", "mutual TLS: the certificate's private key (PEM)");
ABSL_FLAG(std::string, tls_ca, "", "mutual TLS: the cluster CA's certificate (PEM)");
ABSL_FLAG(uint64_t, max_lag, 0,
          "pause training while a live peer has not applied our last N messages (0: never)");
ABSL_FLAG(int32_t, heartbeat_ms, 100, "heartbeat interval on every peer stream");
ABSL_FLAG(std::string, gossip_overlay, "mesh",
          "how fresh messages travel: mesh (the origin sends to every member) or tree (down a "
          "binomial tree over the members, at most log2 N copies from any node; every member "
          "of a cluster must use the same)");
ABSL_FLAG(int32_t, failure_timeout_ms, 3000, "a peer silent this long is marked dead");
ABSL_FLAG(int64_t, log_cap_mb, 256, "message log byte cap (MiB) for anti-entropy");
ABSL_FLAG(int64_t, early_cap_mb, 256,
          "memory (MiB) held in all for messages that arrived before the ones they follow");
ABSL_FLAG(int64_t, max_origins, 4096,
          "origins (a worker's node id and incarnation) known at most; past it a new origin's "
          "messages are dropped (counted: origins_refused), members' current ones excepted");
ABSL_FLAG(int64_t, max_backlog_mb, 0,
          "pause training while our own messages not yet applied by a live peer exceed this "
          "(MiB; 0: --log-cap-mb / (2 x members), so the log always holds them)");
ABSL_FLAG(int32_t, max_message_mb, 64, "largest gossip frame accepted or sent (MiB)");
ABSL_FLAG(int32_t, stream_window_mb, 8,
          "each gossip stream's initial HTTP/2 flow-control window (MiB): a stream moves at "
          "most this per round trip (1 Gbit/s at 50 ms RTT needs 6)");
ABSL_FLAG(int32_t, snapshot_stripes, 4,
          "fetch a snapshot (joining, re-joining) in up to this many stripes, each on its own TCP "
          "connection (1 to 16; at least 1 MiB each): one connection's buffers bound it on a "
          "long fat link");
ABSL_FLAG(int32_t, stream_lanes, 3,
          "extra TCP connections (lanes, 0 to 16) to each peer that Updates of 1 MiB or more "
          "(dense, 8-bit, 1-bit codecs on big models) also go on: one connection's buffers "
          "bound it on a long fat link. Threshold-coded messages open none");
ABSL_FLAG(int32_t, receive_threads, 0,
          "threads that validate (decode, CRC, checksum) the peers' messages off the gossip "
          "node's lock, the node's own thread one of them (0: one per core; 1 to 64)");
ABSL_FLAG(int32_t, quiesce_timeout_s, 600,
          "after training, wait at most this long for the cluster to be quiescent");
ABSL_FLAG(int32_t, check_interval_ms, 2000,
          "check the replica's checksum against the messages it applied this often, and "
          "compare with peers (stretched so checks take at most 1% of the time; 0: never)");
// Test-only faults (the failure tests).
ABSL_FLAG(uint64_t, fault_corrupt_weight_at_step, 0,
          "TEST ONLY: before this step, add one quantum to one weight of the training replica "
          "(a memory fault the replica check must catch and repair)");
ABSL_FLAG(uint64_t, fault_die_after_partial_send, 0,
          "TEST ONLY: send this seq to one peer only, then exit at once (code 86)");
ABSL_FLAG(uint64_t, fault_corrupt_seq, 0, "TEST ONLY: send a corrupt copy of this seq first");
ABSL_FLAG(double, fault_duplicate, 0, "TEST ONLY: probability of sending an Update twice");
ABSL_FLAG(double, fault_delay, 0, "TEST ONLY: probability of delaying an Update (reorders)");
ABSL_FLAG(int32_t, fault_max_delay_ms, 0, "TEST ONLY: longest such delay");

namespace {

using namespace reckon::worker;  // NOLINT: main's own translation unit
using namespace reckon::model;   // NOLINT

// The exit codes reckonctl follows too (base/exit_codes.h).
using reckon::base::kExitCannotStart;
using reckon::base::kExitFailed;
using reckon::base::kExitOk;
using reckon::base::kExitStopped;
using reckon::base::kExitUsage;

int UsageError(const absl::Status& s) {
  std::cerr << "reckon-worker: " << s.message() << "\n";
  return kExitUsage;
}

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

absl::StatusOr<TrainerOptions> OptionsFromFlags() {
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

// --tls-cert, --tls-key, --tls-ca: mutual TLS and signed updates, all or none.
absl::Status TlsFromFlags(PeerOptions* peer_options) {
  reckon::worker::TlsFiles files;
  files.ca = absl::GetFlag(FLAGS_tls_ca);
  files.cert = absl::GetFlag(FLAGS_tls_cert);
  files.key = absl::GetFlag(FLAGS_tls_key);
  return reckon::worker::UseTls(files, peer_options);
}

// The test-only --fault-* flags of the gossip links.
absl::Status FaultsFromFlags(reckon::server::FaultOptions* faults) {
  reckon::server::FaultOptions& f = *faults;
  f.die_after_partial_send_seq = absl::GetFlag(FLAGS_fault_die_after_partial_send);
  f.corrupt_seq = absl::GetFlag(FLAGS_fault_corrupt_seq);
  f.duplicate_probability = absl::GetFlag(FLAGS_fault_duplicate);
  f.delay_probability = absl::GetFlag(FLAGS_fault_delay);
  f.max_delay_ms = absl::GetFlag(FLAGS_fault_max_delay_ms);
  if (!(f.duplicate_probability >= 0 && f.duplicate_probability <= 1) ||
      !(f.delay_probability >= 0 && f.delay_probability <= 1) || f.max_delay_ms < 0) {
    return absl::InvalidArgumentError("--fault-* probabilities must be in [0, 1]");
  }
  return absl::OkStatus();
}

// What every member of the cluster must share (the handshake compares it).
absl::StatusOr<reckon::v1::ClusterFingerprint> FingerprintFromFlags(const TrainerOptions& o) {
  reckon::v1::ClusterFingerprint f;
  const BackendConfig& b = o.backend_config;
  f.set_model(b.shape.ToString());
  f.set_fraction_bits(b.fraction_bits);
  f.set_codec(o.wire_codec);
  f.set_seed(o.seed);
  f.set_protocol_version(1);
  f.set_param_count(b.shape.param_count());
  f.set_pretrain_samples(static_cast<uint64_t>(o.pretrain_samples));
  // Cheap whatever the data's size: headers, counts, each file's ends.
  if (absl::GetFlag(FLAGS_synthetic)) {
    f.set_data("synthetic");
  } else {
    RECKON_ASSIGN_OR_RETURN(const std::string data, DataIdentity(o.data_dir));
    f.set_data(data);
  }
  if (const std::string overlay = absl::GetFlag(FLAGS_gossip_overlay); overlay == "tree") {
    f.set_overlay(reckon::v1::GOSSIP_OVERLAY_TREE);
  } else if (overlay != "mesh") {
    return absl::InvalidArgumentError(
        absl::StrCat("--gossip-overlay '", overlay.substr(0, 64), "' is not mesh or tree"));
  }
  return f;
}

// --stream-window-mb, --snapshot-stripes, --stream-lanes: how many TCP
// connections carry what, and how much each keeps in flight;
// --receive-threads: how many threads validate what arrives.
absl::Status ConnectionsFromFlags(PeerOptions* p) {
  const int stream_window = absl::GetFlag(FLAGS_stream_window_mb);
  if (stream_window < 1 || stream_window > 1024) {
    return absl::InvalidArgumentError("--stream-window-mb must be from 1 to 1024");
  }
  p->transport.stream_window_bytes = stream_window << 20;
  const int stripes = absl::GetFlag(FLAGS_snapshot_stripes);
  if (stripes < 1 || stripes > static_cast<int>(reckon::server::kMaxSnapshotStripes)) {
    return absl::InvalidArgumentError("--snapshot-stripes must be from 1 to 16");
  }
  p->transport.snapshot_stripes = stripes;
  const int lanes = absl::GetFlag(FLAGS_stream_lanes);
  if (lanes < 0 || lanes > static_cast<int>(reckon::server::kMaxLanes)) {
    return absl::InvalidArgumentError("--stream-lanes must be from 0 to 16");
  }
  p->node.lanes = static_cast<uint32_t>(lanes);
  const int receive_threads = absl::GetFlag(FLAGS_receive_threads);
  if (receive_threads < 0 || receive_threads > 64) {
    return absl::InvalidArgumentError("--receive-threads must be from 0 (one per core) to 64");
  }
  p->node.receive_threads = receive_threads;
  return absl::OkStatus();
}

// Whether this worker waits for the cluster before it joins: a worker that
// joins after the warm-up (--start-workers), or one that is not shard 0's
// in a pre-training cluster (--pretrain-samples).
absl::Status JoinRuleFromFlags(const TrainerOptions& o, PeerOptions* p) {
  if (o.start_workers > 0 && o.shard >= o.start_workers) {
    size_t samples = 0;
    if (IsNpyDataset(o.data_dir)) {
      RECKON_ASSIGN_OR_RETURN(const NpyDatasetShape data, InspectNpyDataset(o.data_dir));
      samples = data.train_samples;
    } else {
      RECKON_ASSIGN_OR_RETURN(samples, CountIdxSamples(o.data_dir, "train"));
    }
    p->join_after_messages = WarmupMessages(o, samples);
    p->join_after_why = absl::StrFormat(
        "--start-workers %d: the workers of shards 0 to %d train the first %.3g of the first "
        "epoch, then the others join",
        o.start_workers, o.start_workers - 1, o.warmup_fraction);
  } else if (o.pretrain_samples > 0 && o.shard != 0) {
    p->join_after_messages = 1;
    p->join_after_why =
        "--pretrain-samples: the worker of shard 0 pre-trains and publishes the cluster's start";
  }
  return absl::OkStatus();
}

absl::StatusOr<PeerOptions> PeerOptionsFromFlags(const TrainerOptions& o) {
  PeerOptions p;
  reckon::server::NodeOptions& n = p.node;
  n.node_id = absl::GetFlag(FLAGS_node_id);
  if (n.node_id.empty()) {
    return absl::InvalidArgumentError(
        "give --node-id NAME (with --listen and --peers) to train with peers, or --standalone");
  }
  if (!reckon::server::ValidNodeId(n.node_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node-id '", n.node_id, "' must be 1-63 characters of [A-Za-z0-9._-]"));
  }
  if (!o.resume_path.empty()) {
    return absl::InvalidArgumentError(
        "--resume is for --standalone; with peers a restarted worker re-joins from a peer's "
        "snapshot");
  }
  // A new incarnation for every process start: wall-clock nanoseconds grow
  // across restarts of one worker.
  n.incarnation = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count());
  p.listen = absl::GetFlag(FLAGS_listen);
  p.advertise = absl::GetFlag(FLAGS_advertise);
  RECKON_ASSIGN_OR_RETURN(n.seeds, ResolvePeers(absl::GetFlag(FLAGS_peers)));
  n.cluster_token = absl::GetFlag(FLAGS_cluster_token);
  RECKON_RETURN_IF_ERROR(TlsFromFlags(&p));
  RECKON_ASSIGN_OR_RETURN(n.fingerprint, FingerprintFromFlags(o));
  const int heartbeat = absl::GetFlag(FLAGS_heartbeat_ms);
  const int failure = absl::GetFlag(FLAGS_failure_timeout_ms);
  if (heartbeat < 1 || failure < 2 * heartbeat) {
    return absl::InvalidArgumentError(
        "--heartbeat-ms must be >= 1 and --failure-timeout-ms at least twice it");
  }
  n.heartbeat_interval = std::chrono::milliseconds(heartbeat);
  n.failure_timeout = std::chrono::milliseconds(failure);
  n.repair_timeout = std::chrono::milliseconds(std::max(5 * heartbeat, 200));
  const int64_t log_cap = absl::GetFlag(FLAGS_log_cap_mb);
  const int max_message = absl::GetFlag(FLAGS_max_message_mb);
  if (log_cap < 1 || max_message < 1 || max_message > 1024) {
    return absl::InvalidArgumentError(
        "--log-cap-mb must be >= 1 and --max-message-mb in [1, 1024]");
  }
  n.log_byte_cap = static_cast<size_t>(log_cap) << 20;
  const int64_t early_cap = absl::GetFlag(FLAGS_early_cap_mb);
  const int64_t max_origins = absl::GetFlag(FLAGS_max_origins);
  if (early_cap < 1 || early_cap > (int64_t{1} << 20) || max_origins < 1 ||
      max_origins > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(
        "--early-cap-mb must be in [1, 1048576] and --max-origins in [1, 16777216]");
  }
  n.early_arrival_byte_cap = static_cast<size_t>(early_cap) << 20;
  n.max_origins = static_cast<size_t>(max_origins);
  const int64_t max_backlog = absl::GetFlag(FLAGS_max_backlog_mb);
  if (max_backlog < 0 || max_backlog > log_cap) {
    return absl::InvalidArgumentError(
        "--max-backlog-mb must be from 0 (automatic) to --log-cap-mb");
  }
  n.max_backlog_bytes = static_cast<size_t>(max_backlog) << 20;
  p.transport.max_message_bytes = max_message << 20;
  RECKON_RETURN_IF_ERROR(ConnectionsFromFlags(&p));
  p.max_lag = absl::GetFlag(FLAGS_max_lag);
  p.bootstrap = absl::GetFlag(FLAGS_bootstrap);
  p.join_by_replay = absl::GetFlag(FLAGS_join_by_replay);
  RECKON_RETURN_IF_ERROR(JoinRuleFromFlags(o, &p));
  const int join_timeout = absl::GetFlag(FLAGS_join_timeout_s);
  if (join_timeout < 0) return absl::InvalidArgumentError("--join-timeout-s must be >= 0");
  p.join_timeout = std::chrono::seconds(join_timeout);
  const int quiesce = absl::GetFlag(FLAGS_quiesce_timeout_s);
  if (quiesce < 1) return absl::InvalidArgumentError("--quiesce-timeout-s must be >= 1");
  p.quiesce_timeout = std::chrono::seconds(quiesce);
  const int check_interval = absl::GetFlag(FLAGS_check_interval_ms);
  if (check_interval < 0) return absl::InvalidArgumentError("--check-interval-ms must be >= 0");
  p.check_interval = std::chrono::milliseconds(check_interval);
  RECKON_RETURN_IF_ERROR(FaultsFromFlags(&p.faults));
  return p;
}

// Joins the cluster the flags name: after this, the node holds the replica
// every peer agrees on (a snapshot, or the seed's when the cluster is new).
absl::StatusOr<std::unique_ptr<GossipPeers>> JoinCluster(PeerOptions peer_options,
                                                         const TrainerOptions& options) {
  RECKON_ASSIGN_OR_RETURN(const std::vector<int64_t> initial,
                          InitialWeights(options.backend_config.shape,
                                         options.backend_config.fraction_bits, options.seed));
  return GossipPeers::Create(std::move(peer_options), initial, options.backend_config.fraction_bits,
                             std::cout);
}

// The run's last lines, and the summary file when asked for.
absl::Status Report(const TrainSummary& summary) {
  if (reckon::base::StopFlag().load()) std::cout << "reckon-worker: stopped by a signal; leaving the cluster\n";
  if (summary.codec == "synthetic") {
    std::cout << absl::StrFormat(
        "done: %d synthetic messages, %d bytes sent, %d received, %.2f s CPU, weights %s\n",
        summary.steps, summary.bytes_sent, summary.bytes_received, summary.cpu_seconds,
        summary.weight_hash.substr(0, 16));
  } else {
    std::cout << absl::StrFormat(
        "done: %d steps, test accuracy %.2f%%, %.0f samples/s, %s, wire %d bytes vs dense %d "
        "(%.0fx), weights %s\n",
        summary.steps, 100 * summary.test_accuracy, summary.samples_per_s, summary.codec,
        summary.wire_bytes, summary.dense_bytes, summary.compression_ratio,
        summary.weight_hash.substr(0, 16));
    // How the trained network leaves reckon (docs/guide-worker.md "Using the trained model").
    if (const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint); !checkpoint.empty()) {
      std::cout << "reckon-worker: for other tools (ONNX or numpy): reckonctl export --checkpoint "
                << checkpoint << " --format onnx --out model.onnx\n";
    } else {
      std::cout << "reckon-worker: --checkpoint PATH keeps this model for reckonctl export (ONNX "
                   "or numpy)\n";
    }
  }
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (path.empty()) return absl::OkStatus();
  return reckon::base::WriteFileAtomically(path, SummaryToJson(summary).dump(2) + "\n");
}

// /metrics, /healthz, /readyz, /status on --http-listen (none when empty).
absl::StatusOr<std::unique_ptr<Observability>> StartObservability(const std::string& node_id) {
  const std::string listen = absl::GetFlag(FLAGS_http_listen);
  if (listen.empty()) return std::unique_ptr<Observability>();
  RECKON_ASSIGN_OR_RETURN(
      std::unique_ptr<Observability> o,
      Observability::Start(listen, node_id, absl::GetFlag(FLAGS_ready_max_behind)));
  std::cout << "reckon-worker: HTTP on " << listen.substr(0, listen.rfind(':')) << ":" << o->port()
            << " (/metrics /healthz /readyz /status)\n"
            << std::flush;
  return o;
}

// Joins (with peers), trains (or, with `synthetic`, emits synthetic
// messages), reports; with `serve`, then stays a member (applying peers'
// updates, serving /metrics, /status and snapshots) until SIGTERM or SIGINT;
// then leaves. Returns the exit code: kExitStopped when a signal came before
// the run was done (while joining, training or waiting for the cluster to
// agree), kExitOk otherwise. Errors are a failure while running.
absl::StatusOr<int> Run(TrainerOptions& options, std::optional<PeerOptions> peer_options,
                        const std::optional<SyntheticOptions>& synthetic,
                        Observability* observability, bool serve) {
  // Filled on the node thread: declared before the peers, destroyed after.
  ArrivalLog arrivals;
  std::unique_ptr<GossipPeers> peers;
  // On every way out, the endpoint lets go of the node before it is destroyed.
  absl::Cleanup detach = [observability] {
    if (observability != nullptr) observability->DetachNode();
  };
  if (peer_options) {
    options.node_id = peer_options->node.node_id;
    options.incarnation = peer_options->node.incarnation;
    if (observability != nullptr) peer_options->metrics = &observability->metrics();
    if (synthetic) peer_options->node.on_accept = arrivals.Hook();
    peer_options->stop = &reckon::base::StopFlag();
    absl::StatusOr<std::unique_ptr<GossipPeers>> joined =
        JoinCluster(*std::move(peer_options), options);
    if (joined.status().code() == absl::StatusCode::kCancelled) {
      std::cout << "reckon-worker: " << joined.status().message() << "\n";
      return kExitStopped;
    }
    if (!joined.ok()) return joined.status();
    peers = *std::move(joined);
    if (observability != nullptr) observability->AttachNode(peers->node());
    options.peers = peers.get();
  }
  if (observability != nullptr) options.metrics = &observability->metrics();
  if (synthetic) {
    RECKON_ASSIGN_OR_RETURN(TrainSummary summary, RunSynthetic(options, *synthetic, std::cout));
    summary.arrivals = arrivals.ToJson();
    summary.arrivals_dropped = arrivals.dropped();
    AddResourceUse(&summary);
    RECKON_RETURN_IF_ERROR(Report(summary));
    return summary.stopped_early ? kExitStopped : kExitOk;
  }
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(options, std::cout);
  if (!trainer.ok()) {
    // Its data, its checkpoint, its backend: a restart fails the same way.
    std::cerr << "reckon-worker: " << trainer.status().message() << "\n";
    return kExitCannotStart;
  }
  if (observability != nullptr && peers == nullptr) observability->SetTrainingStarted();
  absl::StatusOr<TrainSummary> summary = (*trainer)->Run();
  if (!summary.ok()) return summary.status();
  RECKON_RETURN_IF_ERROR(Report(*summary));
  if (summary->stopped_early) return kExitStopped;
  if (!serve || reckon::base::StopFlag().load()) return kExitOk;
  if (observability != nullptr) observability->metrics().OnTrainingFinished();
  std::cout << "reckon-worker: training is over; serving until SIGTERM (--after-training serve)\n";
  if (peers != nullptr) {
    std::cout << "reckon-worker: its model, while it serves: reckonctl export --peer "
              << peers->address()
              << (absl::GetFlag(FLAGS_cluster_token).empty() ? "" : " --cluster-token TOKEN")
              << " --format onnx --out model.onnx\n";
  }
  std::cout << std::flush;
  RECKON_RETURN_IF_ERROR((*trainer)->Serve(Report));
  std::cout << "reckon-worker: stopped by a signal; leaving the cluster\n" << std::flush;
  return kExitOk;
}

// --synthetic and its flags: nullopt without it; kInvalidArgument naming
// the flag that does not fit.
absl::StatusOr<std::optional<SyntheticOptions>> SyntheticFromFlags(const TrainerOptions& options,
                                                                   bool serve) {
  if (!absl::GetFlag(FLAGS_synthetic)) return std::optional<SyntheticOptions>();
  if (absl::GetFlag(FLAGS_standalone)) {
    return absl::InvalidArgumentError(
        "--synthetic is a member of a cluster: not with --standalone");
  }
  if (serve) {
    return absl::InvalidArgumentError(
        "--synthetic ends after --max-steps; --after-training serve is for training workers");
  }
  if (options.backend_config.mode != UpdateMode::kThreshold ||
      options.wire_codec != reckon::v1::CODEC_THRESHOLD_RICE) {
    return absl::InvalidArgumentError(
        "--synthetic emits threshold messages: use it with --codec threshold --wire-format rice");
  }
  SyntheticOptions s;
  s.updates_per_message = absl::GetFlag(FLAGS_synthetic_updates);
  s.rate = absl::GetFlag(FLAGS_synthetic_rate);
  RECKON_RETURN_IF_ERROR(CheckSyntheticOptions(s, options.backend_config.shape.param_count()));
  return std::optional<SyntheticOptions>(s);
}

}  // namespace

// Every flag defined in this file, under the headings of --help (the
// fault injection for tests only under --helpfull). A flag added to this
// file and to no group is listed under "Other", which the worker's CLI test
// refuses.
absl::StatusOr<reckon::base::FlagScope> WorkerFlags() {
  reckon::base::FlagScope scope =
      reckon::base::FlagScope::FromFile("reckon-worker", "worker/main.cc");
  const std::vector<std::pair<std::string, std::vector<std::string>>> groups = {
      {"Model and optimizer",
       {"recipe", "layers", "activation", "optimizer", "lr", "momentum", "weight_decay",
        "adagrad_placement", "match_momentum_to_cluster", "lr_schedule", "halve_after",
        "warmup_steps", "warmup_batch", "warmup_fraction", "pretrain_samples", "seed"}},
      {"Schedule", {"epochs", "batch", "max_steps", "auto_batch", "auto_batch_lr_power",
                    "auto_batch_every", "auto_batch_samples", "auto_batch_eval",
                    "auto_batch_tolerance"}},
      {"Data", {"data_dir", "data_in_memory", "shard", "eval_samples"}},
      {"Compression (what each step sends)",
       {"codec", "threshold", "target_density", "wire_format", "error_feedback", "absmax_every",
        "fraction_bits"}},
      {"Compute", {"backend", "gemm_precision", "threads"}},
      {"Output and the trained model",
       {"checkpoint", "resume", "summary_json", "progress", "after_training"}},
      {"Cluster", {"standalone", "node_id", "listen", "advertise", "peers", "bootstrap",
                   "start_workers", "join_by_replay", "join_timeout_s", "max_lag",
                   "quiesce_timeout_s", "heartbeat_ms", "failure_timeout_ms", "gossip_overlay",
                   "check_interval_ms"}},
      {"Security", {"cluster_token", "tls_cert", "tls_key", "tls_ca"}},
      {"Observability", {"http_listen", "ready_max_behind"}},
      {"Transport and limits",
       {"stream_lanes", "stream_window_mb", "snapshot_stripes", "receive_threads",
        "max_message_mb", "max_backlog_mb", "log_cap_mb", "early_cap_mb", "max_origins"}},
      {"Benchmarking (synthetic members)",
       {"synthetic", "synthetic_updates", "synthetic_rate"}},
  };
  for (const auto& [title, names] : groups) RECKON_RETURN_IF_ERROR(scope.Group(title, names));
  RECKON_RETURN_IF_ERROR(scope.Group(
      "Testing (fault injection)",
      {"fault_corrupt_weight_at_step", "fault_die_after_partial_send", "fault_corrupt_seq",
       "fault_duplicate", "fault_delay", "fault_max_delay_ms"},
      /*hidden=*/true));
  return scope;
}

// With --standalone, what only a member has is refused, not ignored:
// kInvalidArgument naming the first such flag given.
absl::Status CheckStandaloneFlags() {
  if (!absl::GetFlag(FLAGS_standalone)) return absl::OkStatus();
  const std::pair<const char*, std::string> member_only[] = {
      {"--peers", absl::GetFlag(FLAGS_peers)},
      {"--node-id", absl::GetFlag(FLAGS_node_id)},
      {"--advertise", absl::GetFlag(FLAGS_advertise)},
      {"--cluster-token", absl::GetFlag(FLAGS_cluster_token)},
      {"--tls-cert", absl::GetFlag(FLAGS_tls_cert)},
      {"--tls-key", absl::GetFlag(FLAGS_tls_key)},
      {"--tls-ca", absl::GetFlag(FLAGS_tls_ca)}};
  for (const auto& [flag, value] : member_only) {
    if (value.empty()) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("--standalone trains alone: not with ", flag, " (leave out one of them)"));
  }
  return absl::OkStatus();
}

int main(int argc, char** argv) {
  reckon::base::TuneAllocatorForLargeFrames();
  // Dashes or underscores (base/flags.h).
  absl::StatusOr<reckon::base::FlagScope> flags = WorkerFlags();
  if (!flags.ok()) {
    std::cerr << "reckon-worker: " << flags.status().message() << "\n";
    return kExitFailed;
  }
  const reckon::base::FlagScope& scope = *flags;
  // --flags-file, then --recipe, each replaced in place by its flags.
  absl::StatusOr<std::vector<std::string>> args =
      reckon::base::ExpandFlagsFiles({argv + 1, argv + argc});
  std::vector<const reckon::worker::Recipe*> recipes;
  if (args.ok()) args = reckon::worker::ExpandRecipes(*args, &recipes);
  if (!args.ok()) {
    std::cerr << "reckon-worker: " << args.status().message() << " (--help lists the flags)\n";
    return kExitUsage;
  }
  const int code = reckon::base::ParseFlagsOrExit(scope, *args, std::cout, std::cerr);
  if (code < 0) {
    for (const reckon::worker::Recipe* recipe : recipes) {
      std::cout << "reckon-worker: --recipe " << recipe->name << ": "
                << absl::StrJoin(recipe->flags, " ") << "\n";
    }
  }
  if (code == 0 && reckon::base::AsksForHelp(*args)) {
    std::cout << "  reckon-worker --standalone [--layers 784,512,512,10] [--codec threshold "
                 "--threshold T] [--epochs N] ...\n  reckon-worker --node-id w0 --listen "
                 "0.0.0.0:7070 --peers w1:7070,w2:7070 --shard 0/3 [training flags]\n";
  }
  if (code >= 0) return code;
  absl::StatusOr<TrainerOptions> options = OptionsFromFlags();
  if (!options.ok()) return UsageError(options.status());
  const std::string after_training = absl::GetFlag(FLAGS_after_training);
  if (after_training != "exit" && after_training != "serve") {
    return UsageError(absl::InvalidArgumentError(
        absl::StrCat("--after-training '", after_training, "' is not exit or serve")));
  }
  const bool serve_after_training = after_training == "serve";
  absl::StatusOr<std::optional<SyntheticOptions>> synthetic =
      SyntheticFromFlags(*options, serve_after_training);
  if (!synthetic.ok()) return UsageError(synthetic.status());
  if (absl::Status alone = CheckStandaloneFlags(); !alone.ok()) return UsageError(alone);
  std::optional<PeerOptions> peer_options;
  if (!absl::GetFlag(FLAGS_standalone)) {
    absl::StatusOr<PeerOptions> parsed = PeerOptionsFromFlags(*options);
    if (!parsed.ok() && parsed.status().code() != absl::StatusCode::kInvalidArgument) {
      std::cerr << "reckon-worker: " << parsed.status().message() << "\n";  // data, TLS files
      return kExitCannotStart;
    }
    if (!parsed.ok()) return UsageError(parsed.status());
    peer_options = *std::move(parsed);
  }
  // SIGTERM / SIGINT: finish the current step (or end the wait), save the
  // checkpoint, leave the cluster; exit kExitStopped before the run is done.
  reckon::base::CatchStopSignals();
  signal(SIGPIPE, SIG_IGN);
  options->stop = &reckon::base::StopFlag();

  absl::StatusOr<std::unique_ptr<Observability>> observability =
      StartObservability(peer_options ? peer_options->node.node_id : "standalone");
  if (!observability.ok()) {
    if (observability.status().code() == absl::StatusCode::kInvalidArgument) {
      return UsageError(observability.status());
    }
    std::cerr << "reckon-worker: " << observability.status().message() << "\n";
    return kExitFailed;
  }
  const absl::StatusOr<int> exit_code = Run(*options, std::move(peer_options), *synthetic,
                                            observability->get(), serve_after_training);
  if (!exit_code.ok()) {
    std::cerr << "reckon-worker: " << exit_code.status().message() << "\n";
    return kExitFailed;
  }
  return *exit_code;
}
