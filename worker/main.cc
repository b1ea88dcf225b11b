// reckon-worker: one training worker. `--standalone` trains alone;
// `--node-id ID --listen ADDR --peers ...` trains with peers through the
// gossip node. Its flags are read once into DaemonOptions
// (worker/daemon_flags.h); nothing here reads a flag.
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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/allocator.h"
#include "base/exit_codes.h"
#include "base/files.h"
#include "base/flags.h"
#include "base/process.h"
#include "base/status_macros.h"
#include "base/stop_signals.h"
#include "codec/elementwise.h"
#include "server/node.h"
#include "worker/daemon_flags.h"
#include "worker/gossip_peers.h"
#include "worker/observability.h"
#include "worker/recipes.h"
#include "worker/synthetic.h"
#include "worker/trainer.h"

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

// The run's last lines, and the summary file when asked for (--checkpoint
// and --summary-json, from `daemon`).
absl::Status Report(const TrainSummary& summary, const DaemonOptions& daemon) {
  if (reckon::base::StopFlag().load()) {
    std::cout << "reckon-worker: " << reckon::base::StoppedBySignal() << "; leaving the cluster\n";
  }
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
    if (const std::string& checkpoint = daemon.trainer.checkpoint_path; !checkpoint.empty()) {
      std::cout << "reckon-worker: for other tools (ONNX or numpy): reckonctl export --checkpoint "
                << checkpoint << " --format onnx --out model.onnx\n";
    } else {
      std::cout << "reckon-worker: --checkpoint PATH keeps this model for reckonctl export (ONNX "
                   "or numpy)\n";
    }
  }
  if (daemon.summary_json.empty()) return absl::OkStatus();
  return reckon::base::WriteFileAtomically(daemon.summary_json,
                                           SummaryToJson(summary).dump(2) + "\n");
}

// /metrics, /healthz, /readyz, /status on --http-listen (none when empty).
absl::StatusOr<std::unique_ptr<Observability>> StartObservability(const DaemonOptions& daemon) {
  const std::string& listen = daemon.http_listen;
  if (listen.empty()) return std::unique_ptr<Observability>();
  const std::string node_id = daemon.peers ? daemon.peers->node.node_id : "standalone";
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<Observability> o,
                          Observability::Start(listen, node_id, daemon.ready_max_behind));
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
absl::StatusOr<int> Run(DaemonOptions& daemon, Observability* observability) {
  TrainerOptions& options = daemon.trainer;
  std::optional<PeerOptions>& peer_options = daemon.peers;
  const std::optional<SyntheticOptions>& synthetic = daemon.synthetic;
  const bool serve = daemon.serve_after_training;
  const bool with_token = peer_options && !peer_options->node.cluster_token.empty();
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
    RECKON_RETURN_IF_ERROR(Report(summary, daemon));
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
  RECKON_RETURN_IF_ERROR(Report(*summary, daemon));
  if (summary->stopped_early) return kExitStopped;
  if (!serve || reckon::base::StopFlag().load()) return kExitOk;
  if (observability != nullptr) observability->metrics().OnTrainingFinished();
  std::cout << "reckon-worker: training is over; serving until SIGTERM (--after-training serve)\n";
  if (peers != nullptr) {
    std::cout << "reckon-worker: its model, while it serves: reckonctl export --peer "
              << peers->address() << (with_token ? " --cluster-token TOKEN" : "")
              << " --format onnx --out model.onnx\n";
  }
  std::cout << std::flush;
  RECKON_RETURN_IF_ERROR(
      (*trainer)->Serve([&daemon](const TrainSummary& s) { return Report(s, daemon); }));
  std::cout << "reckon-worker: " << reckon::base::StoppedBySignal() << "; leaving the cluster\n"
            << std::flush;
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  reckon::base::TuneAllocatorForLargeFrames();
  reckon::base::RaiseOpenFileLimit();  // a descriptor a NumPy feature file
  // A bad RECKON_CPU_ISA stops the process here, before anything starts
  // (codec/elementwise.h), not at the codec's first pass.
  reckon::codec::IsaCeilingName();
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
  absl::StatusOr<DaemonOptions> daemon = DaemonOptionsFromFlags();
  if (!daemon.ok() && daemon.status().code() != absl::StatusCode::kInvalidArgument) {
    std::cerr << "reckon-worker: " << daemon.status().message() << "\n";  // data, TLS files
    return kExitCannotStart;
  }
  if (!daemon.ok()) return UsageError(daemon.status());
  // SIGTERM / SIGINT: finish the current step (or end the wait), save the
  // checkpoint, leave the cluster; exit kExitStopped before the run is done.
  reckon::base::CatchStopSignals();
  signal(SIGPIPE, SIG_IGN);
  daemon->trainer.stop = &reckon::base::StopFlag();

  absl::StatusOr<std::unique_ptr<Observability>> observability = StartObservability(*daemon);
  if (!observability.ok()) {
    if (observability.status().code() == absl::StatusCode::kInvalidArgument) {
      return UsageError(observability.status());
    }
    std::cerr << "reckon-worker: " << observability.status().message() << "\n";
    return kExitFailed;
  }
  const absl::StatusOr<int> exit_code = Run(*daemon, observability->get());
  if (!exit_code.ok()) {
    std::cerr << "reckon-worker: " << exit_code.status().message() << "\n";
    return kExitFailed;
  }
  return *exit_code;
}
