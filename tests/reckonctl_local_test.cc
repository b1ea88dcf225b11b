// `reckonctl local`, the real binary: a short two-worker cluster on loopback
// and its summary, read back as JSON.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/json.h"
#include "base/process.h"
#include "ctl/gossip_figures.h"
#include "ctl/net_lab.h"
#include "tests/http_client.h"
#include "tests/test_process.h"

namespace reckon {
namespace {

using ::reckon::testing::RunProcess;
using ::reckon::testing::ScratchDir;

// `reckonctl local` with a small model and bounded steps: seconds per run.
std::vector<std::string> SmallClusterArgs(int workers, const ScratchDir& dir,
                                          const std::string& summary, int steps = 40) {
  // clang-format off
  return {"local", "--workers", std::to_string(workers), "--work-dir", (dir / "work").string(),
          "--summary-json", summary, "--timeout-s", "300", "--layers", "784,32,10",
          "--epochs", "1", "--threads", "1", "--eval-samples", "1000", "--max-steps",
          std::to_string(steps), "--heartbeat-ms", "50"};
  // clang-format on
}

// A four-worker SmallClusterArgs cluster with `extra` flags: its summary,
// after checking what every such run must show (exit 0, identical replicas,
// each worker applied the three others' `steps` messages each).
//
// Staleness is bounded (--max-lag 2): unbounded, how stale the steps each
// worker applies are depends on the load, and under the sanitizers onebit
// ended anywhere from 0.51 to 0.78 test accuracy after 100 steps. The bound
// does not fix how the four workers' steps interleave, though: in a run
// under load that ended at 0.69, two workers had finished while the others
// were at steps 81 and 83, which then trained on with the momentum and
// learning rate matched to fewer workers. CI failed
// onebit at 0.565 before the bound (2026-11-26) and at 0.574 with it
// (2026-11-30); three such clusters at once under the sanitizers gave
// 0.62-0.84 over 27 runs, one at a time 0.75-0.84. So the tests here ask
// that the model learns (kLearnedAccuracy; chance is 0.10); how well each
// codec trains is measured outside CI (docs/benchmarks.md).
constexpr double kLearnedAccuracy = 0.45;

base::Json RunFourWorkers(const std::vector<std::string>& extra, int steps = 100) {
  ScratchDir dir;
  const std::string summary = (dir / "local.json").string();
  std::vector<std::string> args = SmallClusterArgs(4, dir, summary, steps);
  args.insert(args.end(), {"--max-lag", "2"});
  args.insert(args.end(), extra.begin(), extra.end());
  ::reckon::testing::ProcessResult r = RunProcess(RECKONCTL_PATH, args, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  absl::StatusOr<base::Json> json = base::ReadJsonFile(summary);
  EXPECT_TRUE(json.ok()) << json.status();
  if (!json.ok()) return base::Json::object();
  EXPECT_EQ(json->at("hashes_equal"), true);
  for (const base::Json& w : json->at("workers")) {
    EXPECT_EQ(w.at("node").at("updates_applied"), 3 * steps) << w.dump(2);
  }
  return *json;
}

// 100 steps, not 40: how late each worker applies the other's steps depends
// on the machine's load, and after 40 steps an unlucky schedule under the
// sanitizers ended at 0.376 (0.62-0.72 usually). After 100 it is 0.72-0.79,
// for the same second of wall time.
TEST(ReckonctlLocal, TwoWorkersEndIdenticalAndTheSummaryParses) {
  ScratchDir dir;
  const std::string summary = (dir / "local.json").string();
  ::reckon::testing::ProcessResult r =
      RunProcess(RECKONCTL_PATH, SmallClusterArgs(2, dir, summary, 100), dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("replicas: identical"), std::string::npos) << r.out;
  absl::StatusOr<base::Json> json = base::ReadJsonFile(summary);
  ASSERT_TRUE(json.ok()) << json.status();
  ASSERT_EQ(json->at("workers").size(), 2u) << json->dump(2);
  EXPECT_EQ(json->at("hashes_equal"), true);
  EXPECT_TRUE(json->at("baseline").is_null());
  const base::Json& w0 = json->at("workers")[0];
  const base::Json& w1 = json->at("workers")[1];
  EXPECT_EQ(w0.at("weight_hash"), w1.at("weight_hash"));
  EXPECT_EQ(w0.at("steps"), 100);
  EXPECT_EQ(w0.at("node_id"), "w0");
  EXPECT_EQ(w1.at("node_id"), "w1");
  // Each applied the other's 100 messages.
  EXPECT_EQ(w0.at("node").at("updates_applied"), 100) << w0.dump(2);
  EXPECT_GT(json->at("compression_ratio").get<double>(), 10);
  EXPECT_GT(json->at("test_accuracy").get<double>(), 0.5) << r.out;
}

// --alone: the same two workers then train at once, each alone on its
// shard with gossip off, and the cluster's samples/s is printed against
// theirs. The alone workers did the cluster's work (the same steps and
// samples, each on its own shard: two different models), sent nothing, and
// the ratio is the two rates' quotient.
TEST(ReckonctlLocal, AloneTrainsTheSameShardsWithoutGossipAndPrintsTheRatio) {
  ScratchDir dir;
  const std::string summary = (dir / "local.json").string();
  std::vector<std::string> args = SmallClusterArgs(2, dir, summary, 40);
  args.push_back("--alone");
  ::reckon::testing::ProcessResult r = RunProcess(RECKONCTL_PATH, args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("cluster / alone: "), std::string::npos) << r.out;
  absl::StatusOr<base::Json> json = base::ReadJsonFile(summary);
  ASSERT_TRUE(json.ok()) << json.status();
  const base::Json& alone = json->at("alone");
  ASSERT_EQ(alone.at("workers").size(), 2u) << alone.dump(2);
  for (int i = 0; i < 2; ++i) {
    const base::Json& a = alone.at("workers")[i];
    const base::Json& c = json->at("workers")[i];
    EXPECT_EQ(a.at("steps"), c.at("steps")) << a.dump(2);
    EXPECT_EQ(a.at("samples"), c.at("samples"));
    EXPECT_EQ(a.at("bytes_sent"), 0) << a.dump(2);
    EXPECT_TRUE(a.at("node").empty()) << "a worker alone has no node";
  }
  EXPECT_NE(alone.at("workers")[0].at("weight_hash"), alone.at("workers")[1].at("weight_hash"))
      << "each trained its own shard";
  const double cluster = json->at("samples_per_s").get<double>();
  const double alone_rate = alone.at("samples_per_s").get<double>();
  ASSERT_GT(alone_rate, 0);
  EXPECT_NEAR(alone.at("cluster_over_alone").get<double>(), cluster / alone_rate,
              1e-9 * cluster / alone_rate);
}

// The quanta codecs (docs/wire-codecs.md) over real gRPC between four worker
// processes: every worker applies the others' messages, the replicas end
// bit-identical, the model learns, and the bytes match the codec's size.
class EveryCodec : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryCodec, FourWorkersEndIdenticalAndLearn) {
  const base::Json summary = RunFourWorkers({"--codec", GetParam()});
  ASSERT_TRUE(summary.contains("workers"));
  for (const base::Json& w : summary.at("workers")) EXPECT_EQ(w.at("codec"), GetParam());
  EXPECT_GT(summary.at("test_accuracy").get<double>(), kLearnedAccuracy);
  // 784,32,10 = 25,450 parameters. onebit: a bit each plus 64 bits per
  // column of 32 (W1) or 10 rows (W2): about 3.4 bits, 9-10x. dyntree8: a
  // byte each, just under 4x. dense: 4 bytes each plus headers.
  const double ratio = summary.at("compression_ratio").get<double>();
  if (GetParam() == "onebit") {
    EXPECT_GT(ratio, 8.5);
    EXPECT_LT(ratio, 11);
  } else if (GetParam() == "dyntree8") {
    EXPECT_GT(ratio, 3.9);
    EXPECT_LT(ratio, 4.0);
  } else {
    EXPECT_GT(ratio, 0.99);
    EXPECT_LT(ratio, 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, EveryCodec, ::testing::Values("onebit", "dyntree8", "dense"),
                         [](const auto& info) { return info.param; });

// AdaGrad fed by the aggregate (Seide's placement, model/optimizer.h) in a
// real cluster: each worker's accumulator takes in the peers' steps as they
// arrive, in whatever order, yet the normalization runs at the origin before
// quantization, so the replicas still end bit-identical. Both ways the
// replica moves: a threshold cluster's sparse +-tau words and onebit's dense
// message.
class AggregateAdagrad : public ::testing::TestWithParam<std::string> {};

TEST_P(AggregateAdagrad, FourWorkersEndIdenticalAndLearn) {
  const base::Json summary = RunFourWorkers({"--codec", GetParam(), "--optimizer", "adagrad",
                                             "--adagrad-placement", "aggregate", "--lr", "0.01"});
  ASSERT_TRUE(summary.contains("workers"));
  EXPECT_GT(summary.at("test_accuracy").get<double>(), kLearnedAccuracy);
}

INSTANTIATE_TEST_SUITE_P(Codecs, AggregateAdagrad, ::testing::Values("threshold", "onebit"),
                         [](const auto& info) { return info.param; });

// reckonctl compare: one cluster per codec and the dense worker alone, a
// table, the CSV and the gnuplot chart.
TEST(ReckonctlCompare, TableCsvAndChartCoverEveryRun) {
  ScratchDir dir;
  const std::string csv = (dir / "compare.csv").string(), svg = (dir / "compare.svg").string();
  ::reckon::testing::ProcessResult r = RunProcess(RECKONCTL_PATH,
                                                  {"compare",
                                                   "--workers",
                                                   "2",
                                                   "--codecs",
                                                   "threshold,onebit",
                                                   "--work-dir",
                                                   (dir / "work").string(),
                                                   "--repeats",
                                                   "2",
                                                   "--csv",
                                                   csv,
                                                   "--chart",
                                                   svg,
                                                   "--timeout-s",
                                                   "300",
                                                   "--layers",
                                                   "784,32,10",
                                                   "--epochs",
                                                   "1",
                                                   "--threads",
                                                   "1",
                                                   "--eval-samples",
                                                   "1000",
                                                   "--max-steps",
                                                   "30",
                                                   "--heartbeat-ms",
                                                   "50"},
                                                  dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("threshold"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dense alone"), std::string::npos) << r.out;
  std::ifstream in(csv);
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header.rfind("codec,workers,bits_per_param_per_step,wire_bytes", 0), 0u) << header;
  EXPECT_NE(header.find(",test_accuracy_min,test_accuracy_max,runs,"), std::string::npos) << header;
  std::vector<std::string> codecs;
  std::map<std::string, double> compression;
  while (std::getline(in, line)) {
    const std::vector<std::string> f = absl::StrSplit(line, ',');
    ASSERT_EQ(f.size(), 13u) << line;
    codecs.push_back(f[0]);
    compression[f[0]] = std::stod(f[4]);
    // Mean accuracy within the runs' range; two runs of each cluster, one
    // of the (deterministic) worker alone.
    const double mean = std::stod(f[5]), low = std::stod(f[6]), high = std::stod(f[7]);
    EXPECT_LE(low, mean) << line;
    EXPECT_LE(mean, high) << line;
    EXPECT_EQ(f[8], f[0] == "dense alone" ? "1" : "2") << line;
    if (f[0] != "dense alone") {
      EXPECT_EQ(f[12], "identical") << line;
      EXPECT_TRUE(std::filesystem::exists(dir / "work" / (f[0] + "-2") / "w0.json")) << f[0];
    }
  }
  EXPECT_EQ(codecs, (std::vector<std::string>{"threshold", "onebit", "dense alone"}));
  EXPECT_GT(compression["threshold"], compression["onebit"]);
  EXPECT_GT(compression["onebit"], 8);
  EXPECT_LT(compression["dense alone"], 1.0);
  // The CSV is a kept figures file (docs/figures/compare.csv): `reckonctl
  // bench show` prints it again.
  ::reckon::testing::ProcessResult shown =
      RunProcess(RECKONCTL_PATH,
                 {"bench", "show", "--from", csv, "--where", "codec=onebit", "--columns",
                  "codec,runs,replicas"},
                 dir.path());
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(shown.out, "codec   runs  replicas\nonebit  2     identical\n");
  std::ifstream chart(svg);
  const std::string text((std::istreambuf_iterator<char>(chart)), {});
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("onebit"), std::string::npos);
  // --codec is compare's to set.
  ::reckon::testing::ProcessResult bad =
      RunProcess(RECKONCTL_PATH, {"compare", "--codec", "onebit"}, dir.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--codecs"), std::string::npos) << bad.err;
}

// What `process` has written to `path` once it contains `text`, or when the
// process ended or `timeout` passed first.
std::string WaitForOutput(const std::filesystem::path& path, const std::string& text,
                          base::ChildProcess& process, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out = ::reckon::testing::ReadWholeFile(path);
  while (out.find(text) == std::string::npos && std::chrono::steady_clock::now() < deadline &&
         !process.Poll()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    out = ::reckon::testing::ReadWholeFile(path);
  }
  return out;
}

// --prometheus: Debian's Prometheus scrapes the workers with dashboards/,
// serves the console page, and stays up after them until Ctrl-C.
TEST(ReckonctlLocal, PrometheusWatchesTheClusterAndServesTheConsole) {
  ASSERT_EQ(std::system("command -v prometheus > /dev/null"), 0)
      << "prometheus is missing: ./deploy/install-deps.sh installs it";
  ScratchDir dir;
  const int port = (*base::FreeLoopbackPorts(1))[0];
  absl::StatusOr<base::ChildProcess> local = base::ChildProcess::Spawn(
      RECKONCTL_PATH,
      {"local", "--workers", "2", "--work-dir", (dir / "work").string(), "--prometheus",
       "--prometheus-listen", absl::StrCat("127.0.0.1:", port), "--dashboards",
       RECKON_SOURCE_DIR "/dashboards", "--layers", "784,32,10", "--epochs", "200", "--threads",
       "1", "--eval-samples", "500"},
      (dir / "out").string(), (dir / "err").string());
  ASSERT_TRUE(local.ok()) << local.status();
  const std::string out =
      WaitForOutput(dir / "out", "until Ctrl-C", *local, std::chrono::seconds(240));
  ASSERT_NE(out.find("until Ctrl-C"), std::string::npos)
      << out << ::reckon::testing::ReadWholeFile(dir / "err");
  EXPECT_NE(out.find(absl::StrCat("http://127.0.0.1:", port, "/consoles/reckon.html")),
            std::string::npos)
      << out;
  // What it scraped while the workers ran.
  const ::reckon::testing::HttpResult steps = ::reckon::testing::HttpGet(
      port, "/api/v1/query?query=" +
                ::reckon::testing::UrlEncode("count(last_over_time(reckon_steps_total[10m]))"));
  ASSERT_EQ(steps.status, 200) << steps.body;
  EXPECT_NE(steps.body.find("\"2\""), std::string::npos) << steps.body;  // both workers
  const ::reckon::testing::HttpResult console =
      ::reckon::testing::HttpGet(port, "/consoles/reckon.html");
  EXPECT_EQ(console.status, 200);
  EXPECT_NE(console.body.find("<td>w1</td>"), std::string::npos) << console.body;
  local->Signal(SIGINT);
  EXPECT_EQ(local->Wait(std::chrono::seconds(30)), 0);
}

// Sends `signal` to every process whose command line contains `text` (as
// a terminal's Ctrl-C reaches a foreground job); returns how many.
int SignalEveryProcessNaming(const std::string& text, int signal) {
  int signalled = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream file(entry.path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(file)),
                              std::istreambuf_iterator<char>());
    if (cmdline.find(text) == std::string::npos) continue;
    if (::kill(std::stoi(name), signal) == 0) ++signalled;
  }
  return signalled;
}

// Ctrl-C (SIGINT, to reckonctl or to the whole process group, as a terminal
// sends it) stops the workers and exits 3, as reckon-worker does when it is
// stopped before the run is done (it exited 1, a failure, before).
TEST(ReckonctlLocal, InterruptedItStopsTheWorkersAndExitsThreeAsTheyDo) {
  for (bool whole_group : {false, true}) {
    SCOPED_TRACE(whole_group ? "the process group" : "reckonctl alone");
    ScratchDir dir;
    absl::StatusOr<base::ChildProcess> local = base::ChildProcess::Spawn(
        RECKONCTL_PATH,
        {"local", "--workers", "2", "--work-dir", (dir / "work").string(), "--layers",
         "784,32,10", "--epochs", "200", "--threads", "1", "--eval-samples", "500"},
        (dir / "out").string(), (dir / "err").string());
    ASSERT_TRUE(local.ok()) << local.status();
    const std::string out = WaitForOutput(dir / "out", " step ", *local, std::chrono::seconds(120));
    ASSERT_NE(out.find(" step "), std::string::npos) << out;
    if (whole_group) {
      // reckonctl and its workers (every command line names the work dir):
      // the workers may exit (3) before reckonctl looks, and that is the
      // interruption, not a failure.
      EXPECT_EQ(SignalEveryProcessNaming((dir / "work").string(), SIGINT), 3);
    } else {
      local->Signal(SIGINT);
    }
    EXPECT_EQ(local->Wait(std::chrono::seconds(60)), 3)
        << ::reckon::testing::ReadWholeFile(dir / "err");
    EXPECT_NE(::reckon::testing::ReadWholeFile(dir / "err").find("interrupted"), std::string::npos)
        << ::reckon::testing::ReadWholeFile(dir / "err");
  }
}

// compare as local: SIGTERM to compare alone stops the cluster it runs (its
// local stops the workers) and it exits 3, not 1 as a failed run.
TEST(ReckonctlCompare, StoppedBySigtermItStopsTheClusterAndExitsThree) {
  ScratchDir dir;
  absl::StatusOr<base::ChildProcess> compare = base::ChildProcess::Spawn(
      RECKONCTL_PATH,
      {"compare", "--workers", "2", "--codecs", "threshold", "--work-dir",
       (dir / "work").string(), "--layers", "784,32,10", "--epochs", "200", "--threads", "1",
       "--eval-samples", "500"},
      (dir / "out").string(), (dir / "err").string());
  ASSERT_TRUE(compare.ok()) << compare.status();
  ASSERT_NE(WaitForOutput(dir / "work" / "threshold.log", " step ", *compare,
                          std::chrono::seconds(120))
                .find(" step "),
            std::string::npos)
      << ::reckon::testing::ReadWholeFile(dir / "err");
  compare->Signal(SIGTERM);
  EXPECT_EQ(compare->Wait(std::chrono::seconds(60)), 3)
      << ::reckon::testing::ReadWholeFile(dir / "err");
  EXPECT_NE(::reckon::testing::ReadWholeFile(dir / "err").find("stopped by a signal"),
            std::string::npos)
      << ::reckon::testing::ReadWholeFile(dir / "err");
  EXPECT_EQ(SignalEveryProcessNaming((dir / "work").string(), 0), 0) << "a worker outlived it";
}

// --link: four dense workers, each in its own network namespace behind a
// 20 Mbit/s link. Each sends 40 messages of 25,450 parameters (102 KB) to
// three peers through its one uplink: 12.2 MB, so the run cannot take less
// than 4.9 s (a bound no machine can beat: the rate is the lab's). Every
// message is still applied exactly once and the replicas end identical.
// Synthetic workers (reckon-worker --synthetic): six members that only emit
// random messages and apply each other's, in the mesh and in the tree
// overlay. The replicas end identical, every origin's 40 messages in every
// vector; either way each message goes to the five others (bytes_sent in
// all at least 4 x what the origins made: less what a late joiner took in
// its snapshot), what is sent is received; every arrival is timed, and the
// figures reckonctl prints agree with them. (How the copies are spread over
// the nodes is GossipNode.TheTreeSpreadsTheOriginsCopiesAndDeliversEachOnce.)
class SyntheticWorkers : public ::testing::TestWithParam<std::string> {};

TEST_P(SyntheticWorkers, MeasureTheGossipLayer) {
  const std::string overlay = GetParam();
  ScratchDir dir;
  const std::string summary = (dir / "local.json").string();
  std::vector<std::string> args = SmallClusterArgs(6, dir, summary);
  args.insert(args.end(), {"--synthetic", "--synthetic-updates", "500", "--synthetic-rate", "50",
                           "--gossip-overlay", overlay});
  ::reckon::testing::ProcessResult r = RunProcess(RECKONCTL_PATH, args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("gossip: 6 nodes (" + overlay + "), 40 messages each"), std::string::npos)
      << r.out;
  absl::StatusOr<base::Json> json = base::ReadJsonFile(summary);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->at("hashes_equal"), true);
  double sent = 0, received = 0, wire = 0, frames_sent = 0, resent = 0;
  for (const base::Json& w : json->at("workers")) {
    EXPECT_EQ(w.at("node").at("overlay"), overlay);
    frames_sent += w.at("node").at("update_frames_sent").get<double>();
    resent += w.at("node").value("repairs_resent", 0.0);
    wire += w.at("wire_bytes").get<double>();
    ASSERT_EQ(w.at("version_vector").size(), 6u) << w.dump(2);
    for (const auto& [origin, seq] : w.at("version_vector").items()) EXPECT_EQ(seq, 40) << origin;
    EXPECT_EQ(w.at("steps"), 40);
    EXPECT_EQ(w.at("updates_sent"), 40 * 500);
    EXPECT_GT(w.at("cpu_seconds").get<double>(), 0);
    EXPECT_GT(w.at("max_rss_bytes").get<double>(), 1 << 20);
    sent += w.at("bytes_sent").get<double>();
    received += w.at("bytes_received").get<double>();
    size_t arrivals = 0;
    for (const auto& [origin, list] : w.at("arrivals").items()) {
      EXPECT_NE(origin, w.at("node_id").get<std::string>());  // its own are not arrivals
      for (const base::Json& a : list) {
        EXPECT_GE(a[0].get<int>(), 1);
        EXPECT_LE(a[0].get<int>(), 40);
        EXPECT_GE(a[1].get<double>(), 0);
        EXPECT_LT(a[1].get<double>(), 60e6);
      }
      arrivals += list.size();
    }
    EXPECT_EQ(arrivals, w.at("node").at("updates_applied").get<size_t>());
  }
  EXPECT_GE(sent, 4 * wire);
  // Nothing is received that was not sent, give or take the frames a
  // worker sends after its summary took its count (heartbeats until its
  // Leave, and the Leave) to a member that is still counting: CI once saw
  // 86 bytes more received than sent of 765 KB. Counting a frame twice
  // would be far more than 1%.
  EXPECT_LE(received, 1.01 * sent);
  EXPECT_GE(received, 0.9 * sent);
  // First copies: 6 x 40 messages to 5 members each, less the late joiners'
  // snapshots, plus the odd repair of a message lost while a stream was
  // replaced. Resends (anti-entropy's, of a message a member has not applied
  // within the repair timeout) come on top when the machine is slow: under
  // the sanitizers beside another test, arrivals took 300-370 ms at p99 and
  // 130-190 frames more went out; a storm of them is still caught.
  //
  // The tree's first copies have a second source: an origin backs its tree
  // up (anti_entropy.h MayRelayInTree), sending its own message to a member
  // that has not said it applied it a failure timeout after it was made, so
  // a tree slower than that (on a loaded machine, not a failed one) gets
  // the origin's copy as well as its parent's: at most 2x, one of each. The
  // mesh's first copies were 1,200 exactly in every run measured. Under the
  // sanitizers on this VM (2026-12-05), the tree with two spinning loads
  // beside it sent 1.05-1.09x, with four 1.05-1.12x (p99 arrivals 0.5-1.1
  // s), and CI beside another test once 1.18x (p99 735 ms), where the bound
  // had been the mesh's 1.1x. 1.35x still catches every member forwarding
  // to its tree and the origin sending to all (2x).
  const double first_copies_bound = overlay == "tree" ? 1.35 : 1.1;
  EXPECT_GE(frames_sent, 0.8 * 6 * 40 * 5);
  EXPECT_LE(frames_sent - resent, first_copies_bound * 6 * 40 * 5) << resent << " resent";
  EXPECT_LE(resent, 0.3 * 6 * 40 * 5);
  const base::Json& g = json->at("gossip");
  EXPECT_EQ(g.at("overlay"), overlay);
  EXPECT_EQ(g.at("nodes"), 6);
  EXPECT_EQ(g.at("messages_per_node"), 40);
  EXPECT_LE(g.at("to_one_p50_ms").get<double>(), g.at("to_all_p50_ms").get<double>());
  EXPECT_LE(g.at("to_all_p50_ms").get<double>(), g.at("to_all_p99_ms").get<double>());
  EXPECT_LT(g.at("messages_untimed").get<double>(), 6 * 40 / 2);
  std::printf("FIGURES %s\n", r.out.substr(r.out.find("gossip: ")).c_str());
}

INSTANTIATE_TEST_SUITE_P(Overlays, SyntheticWorkers, ::testing::Values("mesh", "tree"),
                         [](const auto& info) { return info.param; });

// The figures from summaries made by hand: three nodes, two messages each.
TEST(GossipFigures, PercentilesAndRatesComeFromTheArrivals) {
  std::vector<base::Json> summaries;
  for (int i = 0; i < 3; ++i) {
    base::Json s = {{"steps", 2},
                    {"wire_bytes", 200},
                    {"train_seconds", 2.0},
                    {"bytes_sent", 4000},
                    {"bytes_received", 2000},
                    {"emit_cpu_seconds", 0.006},
                    {"max_rss_bytes", (i + 1) << 20}};
    s["arrivals"] = base::Json::object();
    for (int o = 0; o < 3; ++o) {
      if (o == i) continue;
      // Message 1 of every origin takes 1 ms to each; message 2, (i + 1) x 10 ms.
      s["arrivals"][absl::StrCat("w", o)] = base::Json::array({{1, 1000}, {2, (i + 1) * 10000}});
    }
    summaries.push_back(s);
  }
  absl::StatusOr<ctl::GossipFigures> f = ctl::ComputeGossipFigures(summaries);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->nodes, 3);
  EXPECT_EQ(f->messages_per_node, 2);
  EXPECT_EQ(f->message_bytes, 100);
  EXPECT_EQ(f->bytes_out_per_s, 2000);
  EXPECT_EQ(f->bytes_in_per_s, 1000);
  EXPECT_DOUBLE_EQ(f->cpu_us_per_message, 1000);  // 6 ms over 2 own + 4 arrived
  EXPECT_EQ(f->max_rss_mb, 3);
  // 12 arrivals: six of 1 ms, then 10, 10, 20, 20, 30, 30 ms.
  EXPECT_EQ(f->to_one_p50_ms, 1);
  EXPECT_EQ(f->to_one_p99_ms, 30);
  // To every node: the three message 1s in 1 ms; message 2 of w0 last
  // reaches w2 (30 ms), of w1 w2 (30), of w2 w1 (20).
  EXPECT_EQ(f->to_all_p50_ms, 1);
  EXPECT_EQ(f->to_all_p99_ms, 30);
  EXPECT_EQ(f->messages_untimed, 0);
  summaries[1].erase("arrivals");
  EXPECT_FALSE(ctl::ComputeGossipFigures(summaries).ok());
}

TEST(ReckonctlLocal, LinkRunsEachWorkerBehindAShapedLink) {
  if (absl::Status s = ctl::NetLab::Available(); !s.ok()) {
    GTEST_SKIP() << "reckonctl local --link skipped: " << s.message();
  }
  const auto start = std::chrono::steady_clock::now();
  base::Json j = RunFourWorkers({"--codec", "dense", "--link", "rate=20mbit,delay=1ms"}, 40);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes_per_worker = j.at("wire_bytes").get<double>() / 4 * 3;
  EXPECT_GT(bytes_per_worker, 12e6);
  EXPECT_GE(wall, 8 * bytes_per_worker / 20e6);
  std::printf("FIGURES 4 dense workers x 40 steps behind 20 Mbit/s links: %.1f s (at least %.1f)\n",
              wall, 8 * bytes_per_worker / 20e6);
}

TEST(ReckonctlLocal, ABadLinkIsAUsageErrorNamingIt) {
  ScratchDir dir;
  ::reckon::testing::ProcessResult r =
      RunProcess(RECKONCTL_PATH, {"local", "--link", "rate=fast"}, dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--link: bad value in 'rate=fast'"), std::string::npos) << r.err;
  r = RunProcess(RECKONCTL_PATH, {"local", "--link", "speed=1gbit"}, dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown link property 'speed'"), std::string::npos) << r.err;
  r = RunProcess(RECKONCTL_PATH, {"local", "--link-mtu", "9000"}, dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--link-mtu needs --link"), std::string::npos) << r.err;
  r = RunProcess(RECKONCTL_PATH, {"local", "--link", "rate=1gbit", "--link-mtu", "100"},
                 dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--link-mtu takes 576 to 65535"), std::string::npos) << r.err;
}

// `reckonctl lab` as the chaos soak drives it: stdin and stdout pipes.
class LabProcess {
 public:
  explicit LabProcess(const std::vector<std::string>& args) {
    int in[2], out[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(out), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
      std::vector<char*> argv = {const_cast<char*>(RECKONCTL_PATH)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(RECKONCTL_PATH, argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = fdopen(out[0], "r");
  }
  ~LabProcess() {
    if (to_ >= 0) close(to_);
    if (from_ != nullptr) fclose(from_);
    if (pid_ > 0) Wait();
  }
  // One line of its output, without the newline; empty at its end.
  std::string ReadLine() {
    char buffer[8192];
    if (fgets(buffer, sizeof buffer, from_) == nullptr) return "";
    std::string line(buffer);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
  }
  std::string Command(const std::string& line) {
    const std::string text = line + "\n";
    EXPECT_EQ(write(to_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    return ReadLine();
  }
  void CloseInput() {
    close(to_);
    to_ = -1;
  }
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
};

// The lab describes its namespaces, answers each command (a bad one with an
// error naming it, without ending), really cuts a partition (a connection
// attempt from worker 0 to worker 1 is dropped: counted as cut), and deletes
// its namespaces when its input ends.
TEST(ReckonctlLab, CommandsOnStdinPartitionAndHealAndTheLabIsGoneAtTheEnd) {
  if (absl::Status s = ctl::NetLab::Available(); !s.ok()) {
    GTEST_SKIP() << "reckonctl lab skipped: " << s.message();
  }
  LabProcess lab({"lab", "--workers", "2"});
  absl::StatusOr<base::Json> description = base::ParseJson(lab.ReadLine(), "lab");
  ASSERT_TRUE(description.ok()) << description.status();
  ASSERT_EQ(description->at("ip").size(), 2u) << description->dump();
  const std::string ns0 = description->at("netns")[0].get<std::string>();
  const std::string ip1 = description->at("ip")[1].get<std::string>();
  EXPECT_TRUE(std::filesystem::exists("/run/netns/" + ns0));
  EXPECT_EQ(description->at("exec")[0].back(), ns0);

  EXPECT_EQ(lab.Command("partition 0 1"), R"({"ok":"partition 0 1"})");
  EXPECT_EQ(lab.Command("partition 0,0"), R"({"error":"worker 0 is in two groups"})");
  EXPECT_EQ(lab.Command("partition 0,7"), R"x({"error":"'7' is not a worker index (0 to 1)"})x");
  EXPECT_EQ(
      lab.Command("reboot"),
      R"x({"error":"unknown command 'reboot' (known: partition, heal, shape, counters, quit)"})x");
  // A TCP connection attempt across the cut: its SYNs vanish.
  ScratchDir scratch;
  ::reckon::testing::ProcessResult r =
      RunProcess("/usr/bin/timeout",
                 {"2", "/usr/sbin/ip", "netns", "exec", ns0, "bash", "-c",
                  absl::StrCat("echo > /dev/tcp/", ip1, "/7070")},
                 scratch.path());
  EXPECT_NE(r.exit_code, 0);
  absl::StatusOr<base::Json> counters = base::ParseJson(lab.Command("counters"), "counters");
  ASSERT_TRUE(counters.ok()) << counters.status();
  EXPECT_GT(counters->at("cut").get<uint64_t>(), 0u) << counters->dump();
  EXPECT_EQ(lab.Command("heal"), R"({"ok":"healed"})");
  EXPECT_EQ(lab.Command("shape delay=1ms"), R"({"ok":"shape delay=1ms"})");
  lab.CloseInput();
  EXPECT_EQ(lab.ReadLine(), "");
  EXPECT_EQ(lab.Wait(), 0);
  EXPECT_FALSE(std::filesystem::exists("/run/netns/" + ns0));
}

// A typo in a flag meant for the workers fails at once, named with the flag
// it probably is, before any worker starts (each worker failed on it once
// the cluster was up).
TEST(ReckonctlLocal, AMisspeltWorkerFlagIsRefusedBeforeAnyWorkerStarts) {
  ScratchDir dir;
  std::vector<std::string> args = SmallClusterArgs(2, dir, (dir / "local.json").string());
  args.insert(args.end(), {"--epoch", "3"});
  ::reckon::testing::ProcessResult r = RunProcess(RECKONCTL_PATH, args, dir.path());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("unknown flag --epoch (did you mean --epochs?)"), std::string::npos)
      << r.err;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "work")) {
    EXPECT_EQ(entry.path().filename(), "worker-flags.txt") << "a worker started";
  }
  // The workers' flags, test-only ones too, and their --no form, pass.
  args = SmallClusterArgs(1, dir, (dir / "local.json").string(), 5);
  args.insert(args.end(), {"--nojoin-by-replay", "--fault-duplicate=0"});
  r = RunProcess(RECKONCTL_PATH, args, dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST(ReckonctlLocal, FlagsItSetsItselfAreRefused) {
  ScratchDir dir;
  for (const char* flag : {"--node-id", "--peers", "--listen", "--shard"}) {
    ::reckon::testing::ProcessResult r =
        RunProcess(RECKONCTL_PATH, {"local", flag, "x"}, dir.path());
    EXPECT_EQ(r.exit_code, 2) << flag;
    EXPECT_NE(r.err.find("is set by reckonctl local"), std::string::npos) << r.err;
  }
  ::reckon::testing::ProcessResult r =
      RunProcess(RECKONCTL_PATH, {"local", "--workers", "0"}, dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--workers takes a number from 1 to 64"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace reckon
