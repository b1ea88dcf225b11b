// reckon-worker's member flags, and every flag read once into DaemonOptions
// (daemon_flags.h).
#include "worker/daemon_flags.h"

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
#include "worker/training_flags.h"

ABSL_FLAG(bool, standalone, false, "train alone, with no peers");
ABSL_FLAG(bool, synthetic, false,
          "join the cluster without training: emit random +-tau messages of "
          "--synthetic-updates updates at --synthetic-rate per second (until --max-steps) and "
          "apply the peers' (measuring the gossip layer at sizes the machine cannot train; "
          "docs/scaling.md)");
ABSL_FLAG(int64_t, synthetic_updates, 1000, "--synthetic: +-tau updates per message");
ABSL_FLAG(double, synthetic_rate, 10, "--synthetic: messages per second (0: as fast as it can)");
ABSL_FLAG(std::string, summary_json, "", "write the run's summary here as JSON");
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
          "pause training while a live peer has not applied our last N messages, as its last "
          "heartbeat said (0: never)");
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
ABSL_FLAG(uint64_t, fault_die_after_partial_send, 0,
          "TEST ONLY: send this seq to one peer only, then exit at once (code 86)");
ABSL_FLAG(uint64_t, fault_corrupt_seq, 0, "TEST ONLY: send a corrupt copy of this seq first");
ABSL_FLAG(double, fault_duplicate, 0, "TEST ONLY: probability of sending an Update twice");
ABSL_FLAG(double, fault_delay, 0, "TEST ONLY: probability of delaying an Update (reorders)");
ABSL_FLAG(int32_t, fault_max_delay_ms, 0, "TEST ONLY: longest such delay");

namespace reckon::worker {
namespace {

using namespace reckon::model;  // NOLINT: the flags name the model's options

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
  reckon::server::ClusterSpec spec;
  const BackendConfig& b = o.backend_config;
  spec.model = b.shape.ToString();
  spec.param_count = b.shape.param_count();
  spec.fraction_bits = b.fraction_bits;
  spec.wire_codec = o.wire_codec;
  spec.seed = o.seed;
  spec.pretrain_samples = static_cast<uint64_t>(o.pretrain_samples);
  // Cheap whatever the data's size: headers, counts, each file's ends.
  if (absl::GetFlag(FLAGS_synthetic)) {
    spec.data = "synthetic";
  } else {
    RECKON_ASSIGN_OR_RETURN(spec.data, DataIdentity(o.data_dir));
  }
  if (const std::string overlay = absl::GetFlag(FLAGS_gossip_overlay); overlay == "tree") {
    spec.overlay = reckon::v1::GOSSIP_OVERLAY_TREE;
  } else if (overlay != "mesh") {
    return absl::InvalidArgumentError(
        absl::StrCat("--gossip-overlay '", overlay.substr(0, 64), "' is not mesh or tree"));
  }
  return reckon::server::MakeFingerprint(spec);
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
  n.incarnation = reckon::server::NewIncarnation();
  p.listen = absl::GetFlag(FLAGS_listen);
  p.advertise = absl::GetFlag(FLAGS_advertise);
  RECKON_ASSIGN_OR_RETURN(n.seeds, ResolvePeers(absl::GetFlag(FLAGS_peers)));
  n.cluster_token = absl::GetFlag(FLAGS_cluster_token);
  RECKON_RETURN_IF_ERROR(TlsFromFlags(&p));
  RECKON_ASSIGN_OR_RETURN(n.fingerprint, FingerprintFromFlags(o));
  RECKON_RETURN_IF_ERROR(reckon::server::SetNodeTimings(
      absl::GetFlag(FLAGS_heartbeat_ms), absl::GetFlag(FLAGS_failure_timeout_ms),
      {"--heartbeat-ms", "--failure-timeout-ms"}, &n));
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

}  // namespace

absl::StatusOr<reckon::base::FlagScope> WorkerFlags() {
  reckon::base::FlagScope scope =
      reckon::base::FlagScope::FromFile("reckon-worker", "worker/daemon_flags.cc");
  const reckon::base::FlagScope training =
      reckon::base::FlagScope::FromFile("reckon-worker", kTrainingFlagsFile);
  scope.flags.insert(scope.flags.end(), training.flags.begin(), training.flags.end());
  std::sort(scope.flags.begin(), scope.flags.end(),
            [](const base::FlagSpec& a, const base::FlagSpec& b) { return a.name < b.name; });
  const std::vector<std::pair<std::string, std::vector<std::string>>> groups = {
      {"Model and optimizer",
       {"recipe", "layers", "activation", "optimizer", "lr", "momentum", "weight_decay",
        "adagrad_placement", "match_momentum_to_cluster", "lr_schedule", "halve_after",
        "warmup_steps", "warmup_batch", "warmup_fraction", "pretrain_samples", "seed"}},
      {"Schedule",
       {"epochs", "batch", "max_steps", "auto_batch", "auto_batch_lr_power", "auto_batch_every",
        "auto_batch_samples", "auto_batch_eval", "auto_batch_tolerance"}},
      {"Data", {"data_dir", "data_in_memory", "shard", "eval_samples"}},
      {"Compression (what each step sends)",
       {"codec", "threshold", "target_density", "wire_format", "error_feedback", "absmax_every",
        "fraction_bits"}},
      {"Compute", {"backend", "gemm_precision", "threads"}},
      {"Output and the trained model",
       {"checkpoint", "resume", "summary_json", "progress", "after_training"}},
      {"Cluster",
       {"standalone", "node_id", "listen", "advertise", "peers", "bootstrap", "start_workers",
        "join_by_replay", "join_timeout_s", "max_lag", "quiesce_timeout_s", "heartbeat_ms",
        "failure_timeout_ms", "gossip_overlay", "check_interval_ms"}},
      {"Security", {"cluster_token", "tls_cert", "tls_key", "tls_ca"}},
      {"Observability", {"http_listen", "ready_max_behind"}},
      {"Transport and limits",
       {"stream_lanes", "stream_window_mb", "snapshot_stripes", "receive_threads", "max_message_mb",
        "max_backlog_mb", "log_cap_mb", "early_cap_mb", "max_origins"}},
      {"Benchmarking (synthetic members)", {"synthetic", "synthetic_updates", "synthetic_rate"}},
  };
  for (const auto& [title, names] : groups) RECKON_RETURN_IF_ERROR(scope.Group(title, names));
  RECKON_RETURN_IF_ERROR(scope.Group(
      "Testing (fault injection)",
      {"fault_corrupt_weight_at_step", "fault_slow_step_ms", "fault_die_after_partial_send",
       "fault_corrupt_seq", "fault_duplicate", "fault_delay", "fault_max_delay_ms"},
      /*hidden=*/true));
  return scope;
}

absl::StatusOr<DaemonOptions> DaemonOptionsFromFlags() {
  DaemonOptions d;
  // What the flags say of training: a flag that does not fit is a usage
  // error whatever the check's code.
  const auto usage = [](const absl::Status& s) {
    return s.code() == absl::StatusCode::kInvalidArgument ? s
                                                          : absl::InvalidArgumentError(s.message());
  };
  absl::StatusOr<TrainerOptions> trainer = TrainerOptionsFromFlags();
  if (!trainer.ok()) return usage(trainer.status());
  d.trainer = *std::move(trainer);
  const std::string after_training = absl::GetFlag(FLAGS_after_training);
  if (after_training != "exit" && after_training != "serve") {
    return absl::InvalidArgumentError(
        absl::StrCat("--after-training '", after_training, "' is not exit or serve"));
  }
  d.serve_after_training = after_training == "serve";
  absl::StatusOr<std::optional<SyntheticOptions>> synthetic =
      SyntheticFromFlags(d.trainer, d.serve_after_training);
  if (!synthetic.ok()) return usage(synthetic.status());
  d.synthetic = *synthetic;
  if (absl::Status alone = CheckStandaloneFlags(); !alone.ok()) return usage(alone);
  if (!absl::GetFlag(FLAGS_standalone)) {
    // Its errors other than kInvalidArgument are files it could not use
    // (the data's identity, TLS files).
    RECKON_ASSIGN_OR_RETURN(d.peers, PeerOptionsFromFlags(d.trainer));
  }
  d.http_listen = absl::GetFlag(FLAGS_http_listen);
  d.ready_max_behind = absl::GetFlag(FLAGS_ready_max_behind);
  d.summary_json = absl::GetFlag(FLAGS_summary_json);
  return d;
}

}  // namespace reckon::worker
