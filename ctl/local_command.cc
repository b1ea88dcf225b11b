// reckonctl local --workers N [training flags]: a cluster on this machine.
// Starts N reckon-worker processes on loopback (each its own shard), shows
// their progress from the Status call, waits until they have all finished
// and left a quiescent cluster, then prints and checks the summary: every
// replica's accuracy and weight hash (identical, or exit 1), the cluster's
// samples/s, bytes on the wire against dense fp32, and with --baseline the
// same figures of one dense worker.
//
// With --link SHAPE (root only) each worker runs in a network namespace of
// its own, behind a link of that rate, delay and loss (ctl/net_lab.h): a
// cloud's network on one machine. The lab is torn down when local exits.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/files.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/process.h"
#include "base/status_macros.h"
#include "base/stop_signals.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"
#include "ctl/gossip_figures.h"
#include "ctl/local_prometheus.h"
#include "ctl/net_lab.h"
#include "ctl/worker_summary.h"
#include "server/grpc_clients.h"
#include "server/grpc_transport.h"
#include "server/version_vector.h"

ABSL_FLAG(bool, baseline, false, "then train one dense worker alone, for comparison");
ABSL_FLAG(bool, alone, false,
          "then train the same workers at once, each alone on its shard with gossip off (same "
          "flags, same threads), and print the cluster's samples/s against theirs");
ABSL_FLAG(std::string, summary_json, "", "write the cluster's summary here as JSON");
ABSL_FLAG(std::string, work_dir, "", "logs and summaries (default: a new /tmp/reckon-local-*)");
ABSL_FLAG(std::string, worker_binary, "",
          "reckon-worker to run (default: the one built beside reckonctl)");
ABSL_FLAG(int64_t, timeout_s, 3600, "stop the workers and fail after this long");
ABSL_FLAG(bool, checkpoints, false,
          "each worker checkpoints to <work-dir>/wN.ck (every epoch and at the end): what "
          "reckonctl export takes");
ABSL_FLAG(bool, prometheus, false,
          "also run Debian's prometheus against the workers, with dashboards/ (alert rules, "
          "console page); it serves until Ctrl-C after the workers end");
ABSL_FLAG(std::string, prometheus_listen, "127.0.0.1:9090", "where that Prometheus listens");
ABSL_FLAG(std::string, dashboards, "",
          "the dashboards/ directory (default: the source tree's, found from reckonctl's path)");

namespace reckon::ctl {
namespace {

// A worker's log, for an error message; empty when unreadable.
std::string ReadLog(const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadFile(path, 1 << 20);
  return text.ok() ? *text : "";
}

std::string TrimNewline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

struct LocalOptions {
  int workers = 4;
  int threads = 1;  // each worker's (--threads), from the cores
  bool baseline = false;
  bool alone = false;
  std::string summary_json;
  std::string work_dir;
  std::string worker_binary;
  int64_t timeout_s = 3600;
  bool checkpoints = false;
  bool prometheus = false;
  std::string prometheus_listen, dashboards;
  std::optional<LinkShape> link;  // set: workers in a network lab
  int link_mtu = 1500;
  std::vector<std::string> training_flags;  // forwarded to every worker
};

const base::FlagScope& LocalFlags() {
  static const base::FlagScope scope{"reckonctl local",
                                     {{"workers"},
                                      {"baseline"},
                                      {"alone"},
                                      {"summary_json"},
                                      {"work_dir"},
                                      {"worker_binary"},
                                      {"timeout_s"},
                                      {"checkpoints"},
                                      {"prometheus"},
                                      {"prometheus_listen"},
                                      {"dashboards"},
                                      {"link"},
                                      {"link_mtu"}}};
  return scope;
}

// Parses local's own flags; every other argument is a training flag for the
// workers. Returns -1 to go on, else the exit code.
int ParseLocal(const std::vector<std::string>& args, LocalOptions* o, std::ostream& out,
               std::ostream& err) {
  if (int code = base::ParseFlagsOrExit(LocalFlags(), args, out, err, &o->training_flags);
      code >= 0) {
    if (code == kExitOk && base::AsksForHelp(args)) {
      out << "Other flags go to every worker unchanged (reckon-worker --help lists them).\n";
    }
    return code;
  }
  const int64_t workers = absl::GetFlag(FLAGS_workers);
  if (workers < 1 || workers > 64) {
    err << "reckonctl local: --workers takes a number from 1 to 64\n";
    return kExitUsage;
  }
  o->timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (o->timeout_s < 1) {
    err << "reckonctl local: --timeout-s must be >= 1\n";
    return kExitUsage;
  }
  o->workers = static_cast<int>(workers);
  // The cores shared out (a --threads among the training flags wins, for
  // the cluster and --alone alike: it comes after this one).
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  o->threads = std::max(1, static_cast<int>(cores) / o->workers);
  o->baseline = absl::GetFlag(FLAGS_baseline);
  o->alone = absl::GetFlag(FLAGS_alone);
  o->checkpoints = absl::GetFlag(FLAGS_checkpoints);
  o->summary_json = absl::GetFlag(FLAGS_summary_json);
  o->work_dir = absl::GetFlag(FLAGS_work_dir);
  o->worker_binary = absl::GetFlag(FLAGS_worker_binary);
  o->prometheus = absl::GetFlag(FLAGS_prometheus);
  o->prometheus_listen = absl::GetFlag(FLAGS_prometheus_listen);
  o->dashboards = absl::GetFlag(FLAGS_dashboards);
  if (const std::string link = absl::GetFlag(FLAGS_link); !link.empty()) {
    absl::StatusOr<LinkShape> shape = ParseLinkShape(link);
    if (!shape.ok()) {
      err << "reckonctl local: --link: " << shape.status().message() << "\n";
      return kExitUsage;
    }
    if (absl::Status s = NetLab::Available(); !s.ok()) {
      err << "reckonctl local: --link " << s.message() << "\n";
      return kExitUsage;
    }
    o->link = *shape;
  }
  const int64_t mtu = absl::GetFlag(FLAGS_link_mtu);
  if (mtu < 576 || mtu > 65535) {
    err << "reckonctl local: --link-mtu takes 576 to 65535\n";
    return kExitUsage;
  }
  if (mtu != 1500 && !o->link) {
    err << "reckonctl local: --link-mtu needs --link (loopback has its own MTU)\n";
    return kExitUsage;
  }
  o->link_mtu = static_cast<int>(mtu);
  for (const std::string& flag : o->training_flags) {
    std::string name = flag.substr(0, flag.find('='));
    std::replace(name.begin(), name.end(), '_', '-');
    if (name == "--node-id" || name == "--listen" || name == "--peers" || name == "--shard" ||
        name == "--standalone" || name == "--http-listen") {
      err << "reckonctl local: " << name << " is set by reckonctl local for each worker\n";
      return kExitUsage;
    }
  }
  return -1;
}

struct Worker {
  std::string name, address, http, log, err, summary;
  std::optional<base::ChildProcess> process;
  std::optional<int> exit_code;
};

std::string ProgressLine(Worker& w) {
  if (w.exit_code) {
    return absl::StrFormat("%-4s exited (%d)", w.name, *w.exit_code);
  }
  absl::StatusOr<v1::NodeStatus> s = server::FetchStatus(w.address, std::chrono::milliseconds(300));
  if (!s.ok()) return absl::StrFormat("%-4s starting", w.name);
  int alive = 0;
  int64_t lag = 0;
  for (const v1::MemberStatus& m : s->members()) {
    if (m.state() == "alive") {
      ++alive;
      lag = std::max(lag, m.lag());
    }
  }
  uint64_t applied = 0;
  for (const v1::VersionEntry& e : s->applied().entries()) applied += e.seq();
  return absl::StrFormat(
      "%-4s step %6d  messages applied %7d  peers alive %d  max lag %4d  %s", w.name,
      s->local_steps(), applied, alive, lag,
      s->training_done() ? (s->quiescent() ? "quiescent" : "done, waiting") : "training");
}

// The cluster's figures, from the workers' summaries.
struct ClusterFigures {
  std::vector<WorkerSummary> workers;
  double samples_per_s = 0, wire_bytes = 0, dense_bytes = 0, compression_ratio = 0;
  double test_accuracy = 0;
  bool hashes_equal = true;
};

absl::StatusOr<ClusterFigures> ReadClusterFigures(const std::vector<Worker>& workers,
                                                  std::ostream& out) {
  ClusterFigures c;
  out << "\nworker  steps  test acc   wire bytes   compression  weights\n";
  for (const Worker& w : workers) {
    absl::StatusOr<WorkerSummary> s = ReadWorkerSummary(w.summary);
    if (!s.ok()) {
      return absl::Status(s.status().code(),
                          absl::StrCat(w.name, " left no valid summary: ", s.status().message()));
    }
    c.hashes_equal = c.hashes_equal && !s->weight_hash.empty() &&
                     (c.workers.empty() || s->weight_hash == c.workers[0].weight_hash);
    c.wire_bytes += s->wire_bytes;
    c.dense_bytes += s->dense_bytes;
    out << absl::StrFormat("%-6s %6.0f  %6.2f%%  %11.0f  %10.0fx  %s\n", w.name, s->steps,
                           100 * s->test_accuracy, s->wire_bytes, s->compression_ratio,
                           s->weight_hash.substr(0, 16));
    c.workers.push_back(*std::move(s));
  }
  c.test_accuracy = c.workers[0].test_accuracy;
  c.samples_per_s = SamplesPerSecondTogether(c.workers);
  c.compression_ratio = c.wire_bytes > 0 ? c.dense_bytes / c.wire_bytes : 0;
  return c;
}

// --alone: the same workers trained at once, each alone on its shard (gossip
// off, the same flags and threads), and the cluster's samples/s against
// theirs, both counted the same way (every worker's samples over the
// slowest one's training time).
absl::StatusOr<base::Json> CompareWithShardsAlone(const LocalOptions& o, const ClusterFigures& c,
                                                  std::ostream& out) {
  out << "alone: the same " << o.workers << " workers, each alone on its shard...\n" << std::flush;
  RECKON_ASSIGN_OR_RETURN(std::vector<WorkerSummary> alone,
                          RunShardsAlone(o.worker_binary, o.work_dir, o.training_flags, o.workers,
                                         o.threads, o.timeout_s));
  const double alone_per_s = SamplesPerSecondTogether(alone);
  const double ratio = alone_per_s > 0 ? c.samples_per_s / alone_per_s : 0;
  out << absl::StrFormat(
      "alone: %.0f samples/s (%d workers on their shards, gossip off)\n"
      "cluster / alone: %.3fx samples/s\n",
      alone_per_s, o.workers, ratio);
  base::Json json;
  json["workers"] = base::Json::array();
  for (const WorkerSummary& w : alone) json["workers"].push_back(w.json);
  json["samples_per_s"] = alone_per_s;
  json["cluster_over_alone"] = ratio;
  return json;
}

int ReportCluster(const LocalOptions& o, const std::vector<Worker>& workers, double wall,
                  std::ostream& out, std::ostream& err) {
  absl::StatusOr<ClusterFigures> c = ReadClusterFigures(workers, out);
  if (!c.ok()) {
    err << "reckonctl local: " << c.status().message() << "\n";
    return kExitFailed;
  }
  out << absl::StrFormat(
      "cluster: %d workers, test accuracy %.2f%%, %.0f samples/s, wire %.0f bytes vs dense fp32 "
      "%.0f (%.0fx less), %.1f s\n",
      o.workers, 100 * c->test_accuracy, c->samples_per_s, c->wire_bytes, c->dense_bytes,
      c->compression_ratio, wall);
  out << (c->hashes_equal
              ? "replicas: identical (" + c->workers[0].weight_hash.substr(0, 16) + ")\n"
              : std::string("replicas: DIFFER\n"));
  base::Json gossip = nullptr;
  if (c->workers[0].json.value("codec", "") == "synthetic" && o.workers > 1) {
    std::vector<base::Json> summaries;
    for (const WorkerSummary& w : c->workers) summaries.push_back(w.json);
    absl::StatusOr<GossipFigures> figures = ComputeGossipFigures(summaries);
    if (!figures.ok()) {
      err << "reckonctl local: " << figures.status().message() << "\n";
      return kExitFailed;
    }
    out << GossipFiguresLine(*figures) << "\n";
    gossip = GossipFiguresJson(*figures);
  }
  base::Json baseline = nullptr;
  if (o.baseline) {
    out << "baseline: one dense worker with the same training flags...\n" << std::flush;
    absl::StatusOr<WorkerSummary> b =
        RunDenseBaseline(o.worker_binary, o.work_dir, o.training_flags, o.timeout_s);
    if (!b.ok()) {
      err << "reckonctl local: baseline: " << b.status().message() << "\n";
      return kExitFailed;
    }
    out << absl::StrFormat(
        "baseline: test accuracy %.2f%%, %.0f samples/s, wire %.0f bytes (dense fp32)\n"
        "cluster vs baseline: %+.2f accuracy points, %.2fx samples/s, %.0fx less traffic\n",
        100 * b->test_accuracy, b->samples_per_s, b->wire_bytes,
        100 * (c->test_accuracy - b->test_accuracy),
        b->samples_per_s > 0 ? c->samples_per_s / b->samples_per_s : 0, c->compression_ratio);
    baseline = b->json;
  }
  base::Json alone = nullptr;
  if (o.alone) {
    absl::StatusOr<base::Json> a = CompareWithShardsAlone(o, *c, out);
    if (!a.ok()) {
      err << "reckonctl local: --alone: " << a.status().message() << "\n";
      return kExitFailed;
    }
    alone = *std::move(a);
  }
  if (!o.summary_json.empty()) {
    base::Json summary;
    summary["workers"] = base::Json::array();
    for (const WorkerSummary& w : c->workers) summary["workers"].push_back(w.json);
    summary["baseline"] = baseline;
    summary["alone"] = alone;
    summary["gossip"] = gossip;
    summary["compression_ratio"] = c->compression_ratio;
    summary["samples_per_s"] = c->samples_per_s;
    summary["hashes_equal"] = c->hashes_equal;
    summary["test_accuracy"] = c->test_accuracy;
    summary["wire_bytes"] = c->wire_bytes;
    summary["dense_bytes"] = c->dense_bytes;
    summary["wall_seconds"] = wall;
    if (absl::Status s = base::WriteFileAtomically(o.summary_json, summary.dump(2) + "\n");
        !s.ok()) {
      err << "reckonctl local: " << s.message() << "\n";
      return kExitFailed;
    }
  }
  if (!c->hashes_equal) {
    err << "reckonctl local: the replicas' weight hashes differ\n";
    return kExitFailed;
  }
  return kExitOk;
}

// Every flag in `flags` is one of `worker`'s (its --helpfull, run once into
// `work_dir`): kInvalidArgument naming the first that is not.
absl::Status CheckWorkerFlags(const std::string& worker, const std::string& work_dir,
                              const std::vector<std::string>& flags) {
  const std::string listing = (std::filesystem::path(work_dir) / "worker-flags.txt").string();
  RECKON_ASSIGN_OR_RETURN(base::ChildProcess help,
                          base::ChildProcess::Spawn(worker, {"--helpfull"}, listing, listing));
  const std::optional<int> code = help.Wait(std::chrono::seconds(30));
  RECKON_ASSIGN_OR_RETURN(std::string text, base::ReadFile(listing, size_t{1} << 20));
  if (code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("reckonctl local: ", worker, " --helpfull failed: ", text.substr(0, 200)));
  }
  std::vector<std::string> known;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "--")) continue;
    known.emplace_back(line.substr(0, line.find_first_of(" =")));
  }
  return base::CheckFlagsKnown("reckonctl local", known, flags);
}

}  // namespace

int RunLocalCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  LocalOptions o;
  if (int code = ParseLocal(args, &o, out, err); code >= 0) return code;
  namespace fs = std::filesystem;
  if (o.worker_binary.empty()) o.worker_binary = FindWorkerBinary();
  if (o.worker_binary.empty() || !fs::exists(o.worker_binary)) {
    err << "reckonctl local: cannot find reckon-worker (give --worker-binary PATH)\n";
    return kExitFailed;
  }
  if (o.prometheus && !fs::exists("/usr/bin/prometheus")) {
    err << "reckonctl local: --prometheus needs Debian's prometheus: apt-get install prometheus\n";
    return kExitUsage;
  }
  if (o.work_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "reckon-local-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      err << "reckonctl local: cannot create a work directory in /tmp\n";
      return kExitFailed;
    }
    o.work_dir = tmpl;
  }
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  if (ec) {
    err << "reckonctl local: cannot create --work-dir " << o.work_dir << ": " << ec.message()
        << "\n";
    return kExitFailed;
  }
  // A typo in a flag for the workers fails here, named, before any starts
  // (it failed in every worker once the cluster was up).
  if (absl::Status s = CheckWorkerFlags(o.worker_binary, o.work_dir, o.training_flags); !s.ok()) {
    err << s.message() << " (reckon-worker --helpfull lists the workers' flags)\n";
    return s.code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
  }
  // Gossip and HTTP addresses: loopback ports, or each worker's own
  // address in the lab (the lab outlives the workers: declared first).
  std::unique_ptr<NetLab> lab;
  std::vector<std::string> addresses, http_addresses;
  if (o.link) {
    absl::StatusOr<std::unique_ptr<NetLab>> made = NetLab::Create(o.workers, o.link_mtu);
    if (!made.ok()) {
      err << "reckonctl local: --link: " << made.status().message() << "\n";
      return kExitFailed;
    }
    lab = *std::move(made);
    lab->Shape(*o.link);
    for (int i = 0; i < o.workers; ++i) {
      addresses.push_back(absl::StrCat(lab->ip(i), ":7070"));
      http_addresses.push_back(absl::StrCat(lab->ip(i), ":9100"));
    }
  } else {
    absl::StatusOr<std::vector<int>> ports = base::FreeLoopbackPorts(2 * o.workers);
    if (!ports.ok()) {
      err << "reckonctl local: " << ports.status().message() << "\n";
      return kExitFailed;
    }
    for (int i = 0; i < o.workers; ++i) {
      addresses.push_back(absl::StrCat("127.0.0.1:", (*ports)[i]));
      http_addresses.push_back(absl::StrCat("127.0.0.1:", (*ports)[o.workers + i]));
    }
  }
  const int threads = o.threads;
  const std::string peer_list = absl::StrJoin(addresses, ",");

  base::CatchStopSignals();

  out << "reckonctl local: " << o.workers << " workers "
      << (lab ? "in network namespaces, each behind a link " + LinkShapeText(*o.link)
              : std::string("on loopback"))
      << ", " << threads << " thread(s) each; logs"
      << (o.checkpoints ? " and checkpoints (wN.ck)" : "") << " in " << o.work_dir << "\n"
      << std::flush;
  std::vector<Worker> workers(o.workers);
  for (int i = 0; i < o.workers; ++i) {
    Worker& w = workers[i];
    w.name = absl::StrCat("w", i);
    w.address = addresses[i];
    w.http = http_addresses[i];
    w.log = absl::StrCat(o.work_dir, "/", w.name, ".log");
    w.err = absl::StrCat(o.work_dir, "/", w.name, ".err");
    w.summary = absl::StrCat(o.work_dir, "/", w.name, ".json");
    fs::remove(w.summary, ec);
    std::vector<std::string> wargs = {"--node-id",      w.name,
                                      "--listen",       w.address,
                                      "--peers",        peer_list,
                                      "--shard",        absl::StrCat(i, "/", o.workers),
                                      "--threads",      absl::StrCat(threads),
                                      "--progress",     "off",
                                      "--summary-json", w.summary,
                                      "--http-listen",  w.http};
    if (o.checkpoints) {
      wargs.insert(wargs.end(), {"--checkpoint", absl::StrCat(o.work_dir, "/", w.name, ".ck")});
    }
    wargs.insert(wargs.end(), o.training_flags.begin(), o.training_flags.end());
    std::string binary = o.worker_binary;
    if (lab) {  // `ip netns exec <ns> reckon-worker ...` (ip execs it: same pid)
      std::vector<std::string> exec = lab->Exec(i);
      binary = exec.front();
      wargs.insert(wargs.begin(), o.worker_binary);
      wargs.insert(wargs.begin(), exec.begin() + 1, exec.end());
    }
    absl::StatusOr<base::ChildProcess> p = base::ChildProcess::Spawn(binary, wargs, w.log, w.err);
    if (!p.ok()) {
      err << "reckonctl local: starting " << w.name << ": " << p.status().message() << "\n";
      return kExitFailed;
    }
    w.process.emplace(*std::move(p));
    out << "  " << w.name << ": gossip " << w.address << ", metrics http://" << w.http
        << "/metrics, status http://" << w.http << "/status\n";
  }
  std::optional<base::ChildProcess> prometheus;
  if (o.prometheus) {
    std::vector<std::string> targets;
    for (const Worker& w : workers) targets.push_back(w.http);
    absl::StatusOr<base::ChildProcess> p =
        StartPrometheus(o.dashboards, o.work_dir, o.prometheus_listen, targets);
    if (!p.ok()) {
      err << "reckonctl local: --prometheus: " << p.status().message() << "\n";
      return kExitFailed;
    }
    prometheus.emplace(*std::move(p));
    out << "  prometheus: http://" << o.prometheus_listen << "/consoles/reckon.html (console), "
        << "http://" << o.prometheus_listen << "/alerts; log in " << o.work_dir
        << "/prometheus/prometheus.log\n";
  }
  out << std::flush;

  // Progress until every worker has exited.
  const bool tty = ::isatty(STDOUT_FILENO);
  const auto start = std::chrono::steady_clock::now();
  auto last_print = start - std::chrono::seconds(60);
  bool drawn = false, failed = false;
  for (;;) {
    bool running = false;
    for (Worker& w : workers) {
      if (!w.exit_code) w.exit_code = w.process->Poll();
      if (!w.exit_code) running = true;
      // A worker that fails makes the cluster's result meaningless: stop the
      // rest. (One stopped by the signal that stopped us did not fail.)
      if (w.exit_code && *w.exit_code != 0 && !failed && !base::StopFlag().load()) {
        failed = true;
        err << "reckonctl local: " << w.name << " exited with " << *w.exit_code << ": "
            << TrimNewline(ReadLog(w.err)).substr(0, 2000) << "\n";
        for (Worker& other : workers) other.process->Signal(SIGTERM);
      }
    }
    const auto now = std::chrono::steady_clock::now();
    // Before "all exited": a Ctrl-C reaches the workers too, and they may
    // all be gone by now.
    if (base::StopFlag().load() || now - start > std::chrono::seconds(o.timeout_s)) {
      err << "reckonctl local: " << (base::StopFlag().load() ? "interrupted" : "timed out")
          << "; stopping the workers\n";
      for (Worker& w : workers) {
        if (!w.exit_code) w.process->Signal(SIGTERM);
      }
      for (Worker& w : workers) {
        if (!w.exit_code && !w.process->Wait(std::chrono::seconds(10))) {
          w.process->Signal(SIGKILL);
        }
      }
      return base::StopFlag().load() ? kExitStopped : kExitFailed;
    }
    if (!running) break;
    const auto every = tty ? std::chrono::milliseconds(500) : std::chrono::milliseconds(5000);
    if (now - last_print >= every) {
      last_print = now;
      if (tty && drawn) out << "\x1b[" << workers.size() << "A";
      for (Worker& w : workers) {
        out << (tty ? "\x1b[2K" : "") << ProgressLine(w) << "\n";
      }
      out << std::flush;
      drawn = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (failed) return kExitFailed;

  const int code = ReportCluster(o, workers, wall, out, err);
  if (prometheus) {
    out << "prometheus keeps serving http://" << o.prometheus_listen
        << "/consoles/reckon.html until Ctrl-C\n"
        << std::flush;
    while (!base::StopFlag().load() && !prometheus->Poll()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    prometheus->Signal(SIGTERM);
    if (!prometheus->Wait(std::chrono::seconds(20))) prometheus->Signal(SIGKILL);
  }
  return code;
}

}  // namespace reckon::ctl
