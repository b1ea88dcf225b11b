// reckonctl bench inbound [--json]: how fast one node takes in its peers'
// messages (issue 33's "measure first"), over the real transport on
// loopback. K origins, each a gRPC Exchange stream that says Hello and then
// writes its threshold Updates (Rice, valid checksum contributions) as fast
// as the stream takes them, into one real GossipNode; a "trainer" thread
// drains what the node accepted into a host replica, as the worker's CPU
// backend does between steps. Per size (Strom's: 14.6M parameters and
// 44,000 updates a message; the default model's at the same density):
// updates and messages accepted per second, the node thread's CPU per
// message (reckon-gossip, from /proc/self/task/<tid>/schedstat) and the
// drain's.
//
// Three kinds of receiving node side by side, on the same messages, each
// batch validated off the lock on 1, 2 and every core's threads
// (NodeOptions::receive_threads): `mirror`, a node with its own mirror
// (quanta-only, applied with prefetching, a large message in stripes);
// `worker`, as `mirror` with no mirror at all (NodeOptions::Replica::kTrainingThread, a worker's
// node: the drain's replica is the only one, checked against the node's ledger); `gpu-host`, a
// worker's node whose drain takes and applies nothing, as a GPU worker's host (its apply runs on
// the device): the node's CPU alone.
//
// Then the training thread's side (--train-steps): a backend (--train-backend,
// the CPU's by default) trains a model (--train-layers, the default model
// 784,512,512,10 by default; batch 100, threshold codec) alone, and
// again as a worker's training thread does with gossip on (the peers'
// messages applied before each step, its own encoded and published after)
// while `--train-origins` origins each send one message a step of the size
// it emits itself, paced at its own step rate alone: the step time with
// gossip on against off, in one run.
#include "ctl/bench_inbound.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "codec/fixed_point.h"
#include "codec/update_message.h"
#include "codec/weight_checksum.h"
#include "cpu/cpu_backend.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"
#include "model/backend.h"
#include "model/model.h"
#include "proto/reckon.grpc.pb.h"
#include "server/cluster_config.h"
#include "server/grpc_transport.h"
#include "server/node.h"
#include "worker/backend_factory.h"

ABSL_FLAG(int64_t, origins, 4, "peers sending to the node (bench inbound)");
ABSL_FLAG(int64_t, messages, 30, "messages each origin sends (bench inbound)");
ABSL_FLAG(int64_t, train_steps, 300,
          "training steps timed alone and while absorbing peers (bench inbound; 0: skip)");
ABSL_FLAG(int64_t, train_origins, 8, "peers sending to the training worker (bench inbound)");
ABSL_FLAG(std::string, paths, "mirror,worker,gpu-host",
          "the receive paths measured, comma-separated (bench inbound; a profile takes one)");
ABSL_FLAG(int64_t, train_threads, 0,
          "the training worker's CPU backend threads (bench inbound; 0: every core)");
ABSL_FLAG(std::string, train_backend, "cpu",
          "the training worker's backend: cpu, cuda or auto (bench inbound)");
ABSL_FLAG(std::string, train_layers, "784,512,512,10",
          "the training worker's model (bench inbound; 784,1800,1800,1800,1800,1800,10 with "
          "--train-activation sigmoid is Strom's)");
ABSL_FLAG(std::string, train_activation, "relu",
          "the training worker's hidden activation, relu or sigmoid (bench inbound)");

namespace reckon::ctl {
namespace {

using namespace inbound;  // NOLINT: the bench's own pieces

struct Path {
  const char* name;  // "mirror", "worker", "gpu-host"
  int threads;
  // "worker": the node keeps no mirror (NodeOptions::Replica::
  // kTrainingThread), as a worker's does: the drain's replica is the only one.
  server::NodeOptions::Replica replica = server::NodeOptions::Replica::kMirror;
  // False: the drain takes what the node accepted and applies none of it,
  // as a GPU worker's host does (its apply runs on the device): what is
  // measured is the node's own CPU.
  bool drain_applies = true;
};

struct Figures {
  Size size;
  Path path;
  int origins = 0;
  int messages = 0;  // per origin
  double seconds = 0;
  double node_cpu_ms_per_message = 0;        // the node thread
  double validation_cpu_ms_per_message = 0;  // the validation threads but the node thread
  double drain_cpu_ms_per_message = 0;
  // The most messages one of the drain's takes held: how many the node
  // accepted, and held decoded, between two takes (a slice's worth when
  // the drain keeps up; docs/benchmarks.md, "The node's slices").
  uint64_t drain_largest_take = 0;
  double message_bytes = 0;
  double updates_per_s() const { return origins * messages * double(size.updates) / seconds; }
  double messages_per_s() const { return origins * messages / seconds; }
};

// `frames`: per origin, its messages (MakeMessages).
absl::StatusOr<Figures> Measure(const Size& size, const Path& path,
                                const std::vector<std::vector<v1::GossipFrame>>& frames) {
  Figures out;
  out.size = size;
  out.path = path;
  const int origins = static_cast<int>(frames.size());
  const int messages = static_cast<int>(frames[0].size());
  out.origins = origins;
  out.messages = messages;
  out.message_bytes = double(frames[0][0].ByteSizeLong());

  server::NodeOptions o;
  o.node_id = "receiver";
  o.incarnation = 1;
  o.fingerprint = Fingerprint(size.params);
  o.receive_threads = path.threads;
  o.replica = path.replica;
  const std::vector<int64_t> initial(size.params, 0);
  RECKON_ASSIGN_OR_RETURN(Receiver receiver, StartReceiver(o, initial, origins));
  server::GossipNode* node = receiver.node.get();
  std::vector<std::unique_ptr<Origin>>& senders = receiver.origins;
  const uint64_t expected = uint64_t(origins) * messages;
  // The drain: what a worker's training thread does with what the node
  // accepted, between steps (here in a loop).
  std::atomic<bool> done{false};
  double drain_cpu_ns = 0;
  uint64_t drained = 0;
  uint64_t largest_take = 0;
  absl::Status drain_status;
  std::string drain_hash;
  uint64_t drain_checksum = 0;   // the drain's replica measured
  uint64_t ledger_checksum = 0;  // what the messages it took give
  // Made before the messages flow: made in the drain's thread, it took
  // 0.1-0.3 s at Strom's size, and the node took in every message of the
  // run meanwhile with no drain (one take of all of them, their 211 MB of
  // decoded words faulted in afresh: a third of the runs 1.5x slower).
  codec::FixedPointReplica replica = *codec::FixedPointReplica::Create(size.params, kFractionBits);
  std::thread drain([&] {
    const double start = OwnCpuNs();
    while (drained < expected && !done.load()) {
      server::Received got = node->training().TakeReceived(false);
      for (const auto& update : got.updates) {
        if (path.drain_applies) {
          if (absl::Status s = codec::ApplyDecoded(*update, &replica); !s.ok()) drain_status = s;
        }
        ++drained;
      }
      ledger_checksum = got.checksum;
      largest_take = std::max<uint64_t>(largest_take, got.updates.size());
      if (got.updates.empty()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    drain_cpu_ns = OwnCpuNs() - start;
    drain_hash = replica.WeightHash();  // after the timing
    drain_checksum = node->service().weight_checksum().Of(replica.quanta());
  });
  const uint64_t node_cpu_before = ThreadCpuNs("reckon-gossip");
  const uint64_t recv_cpu_before = ThreadCpuNs("reckon-recv");
  const auto start = Clock::now();
  std::vector<std::thread> writers;
  for (int i = 0; i < origins; ++i) {
    writers.emplace_back([&, i] { senders[i]->Send(frames[i]); });
  }
  const auto deadline = start + std::chrono::minutes(5);
  while (node->service().counters().updates_applied() < expected && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const uint64_t node_cpu_ns = ThreadCpuNs("reckon-gossip") - node_cpu_before;
  const uint64_t recv_cpu_ns = ThreadCpuNs("reckon-recv") - recv_cpu_before;
  for (std::thread& w : writers) w.join();
  // The drain ends by itself once it has applied every message the node
  // accepted; if the node fell short, it is told to stop.
  if (node->service().counters().updates_applied() < expected) done = true;
  drain.join();
  if (!drain_status.ok()) return drain_status;
  const uint64_t applied = node->service().counters().updates_applied();
  // The node's mirror (applied in stripes on the receive threads when the
  // messages are large) and the drain's replica (one thread) took the same
  // messages: they must be the same bit for bit. Without a mirror, the
  // drain's replica must measure what the node's ledger says.
  const std::string mirror_hash = path.replica == server::NodeOptions::Replica::kMirror
                                      ? node->service().ReplicaHash()
                                      : drain_hash;
  senders.clear();
  node->Stop(false, std::chrono::milliseconds(0));
  receiver.server->Shutdown(std::chrono::milliseconds(1000));
  if (applied < expected) {
    return absl::DeadlineExceededError(
        absl::StrCat("the node accepted ", applied, " of ", expected, " messages in 5 minutes"));
  }
  if (path.drain_applies && drain_checksum != ledger_checksum) {
    return absl::DataLossError(absl::StrCat("the drain's replica has checksum ", drain_checksum,
                                            " but the ", expected, " messages it applied give ",
                                            ledger_checksum));
  }
  if (path.drain_applies && mirror_hash != drain_hash) {
    return absl::DataLossError(absl::StrCat("the node's mirror (", mirror_hash,
                                            ") is not the replica the drain applied the same ",
                                            expected, " messages to (", drain_hash, ")"));
  }
  out.node_cpu_ms_per_message = node_cpu_ns / 1e6 / double(expected);
  out.validation_cpu_ms_per_message = recv_cpu_ns / 1e6 / double(expected);
  out.drain_cpu_ms_per_message = drain_cpu_ns / 1e6 / double(expected);
  out.drain_largest_take = largest_take;
  return out;
}

void Print(const Figures& f, bool json, std::ostream& out) {
  if (json) {
    out << base::Json{{"size", f.size.name},
                      {"params", f.size.params},
                      {"updates_per_message", f.size.updates},
                      {"message_bytes", f.message_bytes},
                      {"path", f.path.name},
                      {"threads", f.path.threads},
                      {"node_mirror", f.path.replica == server::NodeOptions::Replica::kMirror},
                      {"drain", f.path.drain_applies ? "cpu-apply" : "take-only"},
                      {"origins", f.origins},
                      {"messages_per_origin", f.messages},
                      {"updates_per_s", f.updates_per_s()},
                      {"messages_per_s", f.messages_per_s()},
                      {"node_cpu_ms_per_message", f.node_cpu_ms_per_message},
                      {"validation_cpu_ms_per_message", f.validation_cpu_ms_per_message},
                      {"drain_cpu_ms_per_message", f.drain_cpu_ms_per_message},
                      {"drain_largest_take", f.drain_largest_take}}
               .dump()
        << "\n";
    return;
  }
  out << absl::StrFormat(
      "  %-8s %8llu %12llu %10.0f  %-8s %7d %8.1f %10.3g %10.3f ms %16.3f ms %11.3f ms\n",
      f.size.name, static_cast<unsigned long long>(f.size.params),
      static_cast<unsigned long long>(f.size.updates), f.message_bytes, f.path.name, f.path.threads,
      f.messages_per_s(), f.updates_per_s(), f.node_cpu_ms_per_message,
      f.validation_cpu_ms_per_message, f.drain_cpu_ms_per_message);
}

// The training thread's side: step times alone and while absorbing.
}  // namespace

int RunBenchInbound(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl bench inbound",
                              {{"json"},
                               {"origins"},
                               {"messages"},
                               {"train_steps"},
                               {"train_origins"},
                               {"train_threads"},
                               {"train_backend"},
                               {"train_layers"},
                               {"train_activation"},
                               {"paths"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  const bool json = absl::GetFlag(FLAGS_json);
  const int64_t origins = absl::GetFlag(FLAGS_origins), messages = absl::GetFlag(FLAGS_messages);
  const int64_t train_steps = absl::GetFlag(FLAGS_train_steps),
                train_origins = absl::GetFlag(FLAGS_train_origins),
                train_threads = absl::GetFlag(FLAGS_train_threads);
  if (origins < 1 || origins > 64 || messages < 1 || messages > 10000 || train_steps < 0 ||
      train_steps > 100000 || train_origins < 1 || train_origins > 64 || train_threads < 0 ||
      train_threads > 256) {
    err << "reckonctl bench inbound: --origins and --train-origins in [1, 64], --messages in [1, "
           "10000], --train-steps in [0, 100000], --train-threads in [0, 256]\n";
    return kExitUsage;
  }
  // Strom's network (Interspeech 2015): 14.6M parameters, about 44,000
  // updates a message; the default model (784,512,512,10) at that density.
  const std::vector<Size> sizes = {{"strom", 14'600'000, 44'000}, {"default", 669'706, 2'018}};
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  constexpr auto kNoMirror = server::NodeOptions::Replica::kTrainingThread;
  std::vector<Path> paths = {{"mirror", 1}, {"mirror", 2}};
  if (cores > 2) paths.push_back({"mirror", cores});
  for (bool applies : {true, false}) {
    const char* name = applies ? "worker" : "gpu-host";
    paths.push_back({name, 1, kNoMirror, applies});
    paths.push_back({name, 2, kNoMirror, applies});
    if (cores > 2) paths.push_back({name, cores, kNoMirror, applies});
  }
  std::set<std::string> wanted;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_paths), ',')) {
    const std::string path(absl::StripAsciiWhitespace(name));
    if (path != "mirror" && path != "worker" && path != "gpu-host") {
      err << "reckonctl bench inbound: --paths: '" << path.substr(0, 32)
          << "' is not a path (mirror, worker, gpu-host)\n";
      return kExitUsage;
    }
    wanted.insert(path);
  }
  std::erase_if(paths, [&](const Path& p) { return !wanted.count(p.name); });
  if (!json) {
    out << absl::StrFormat(
        "One node taking in %d origins' messages (%d each) over gRPC on loopback, validated off "
        "the lock on `threads` threads. mirror: a quanta-only mirror applied with prefetching, a "
        "large message in stripes on those threads, checked against the drain's replica; worker: "
        "as mirror, with no mirror (a worker's node: the drain's replica is the only one, checked "
        "against the node's ledger); gpu-host: a worker's node whose drain applies nothing (a "
        "GPU worker's host: its apply runs on the device)\n"
        "  size       params  updates/msg  msg bytes  path     threads    msg/s  updates/s  "
        "node CPU/msg  validation CPU/msg  drain CPU/msg\n",
        origins, messages);
  }
  for (const Size& size : sizes) {
    std::vector<std::vector<v1::GossipFrame>> frames;
    for (int i = 0; i < origins; ++i) {
      frames.push_back(MakeMessages(absl::StrCat("o", i), size, static_cast<int>(messages),
                                    1000 + static_cast<uint64_t>(i)));
    }
    for (const Path& path : paths) {
      absl::StatusOr<Figures> f = Measure(size, path, frames);
      if (!f.ok()) {
        err << "reckonctl bench inbound: " << size.name << " " << path.name << ": "
            << f.status().message() << "\n";
        return kExitFailed;
      }
      Print(*f, json, out);
    }
  }
  if (train_steps > 0) {
    absl::StatusOr<TrainingFigures> t = MeasureTraining(
        static_cast<int>(train_origins), static_cast<int>(train_steps),
        static_cast<int>(train_threads),
        TrainingModel{absl::GetFlag(FLAGS_train_backend), absl::GetFlag(FLAGS_train_layers),
                      absl::GetFlag(FLAGS_train_activation)});
    if (!t.ok()) {
      err << "reckonctl bench inbound: training: " << t.status().message() << "\n";
      return kExitFailed;
    }
    PrintTraining(*t, json, out);
  }
  return kExitOk;
}

}  // namespace reckon::ctl
