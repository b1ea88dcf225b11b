// Failure scenarios end to end: real reckon-worker
// processes over real gRPC, faults made the way they happen (signals, a
// loaded machine). Labelled `fault`; each test is bounded in time and cleans
// up its processes when it fails. The figures each prints are recorded in
// docs/gossip.md.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/gossip_harness.h"

namespace reckon {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Cluster;
using testing::Counter;
using testing::Field;
using testing::Versions;
using Clock = std::chrono::steady_clock;

// Steps per second worker i takes over `window`, from its status.
double StepRate(Cluster& c, int i, milliseconds window) {
  std::optional<v1::NodeStatus> a = c.Status(i);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(window);
  std::optional<v1::NodeStatus> b = c.Status(i);
  const double seconds_passed = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!a || !b) return -1;
  return double(b->local_steps() - a->local_steps()) / seconds_passed;
}

// Busy loops on every core while alive: "a loaded machine".
class CpuLoad {
 public:
  explicit CpuLoad(int processes) {
    for (int i = 0; i < processes; ++i) {
      absl::StatusOr<base::ChildProcess> p = base::ChildProcess::Spawn(
          "/bin/sh", {"-c", "while :; do :; done"}, "/dev/null", "/dev/null");
      if (p.ok()) loops_.push_back(*std::move(p));
    }
  }
  ~CpuLoad() {
    for (auto& p : loops_) {
      p.Signal(SIGKILL);
      p.Wait(seconds(5));
    }
  }
  size_t size() const { return loops_.size(); }

 private:
  std::vector<base::ChildProcess> loops_;
};

// SIGSTOP one of three workers for 60 s. The others keep training at full
// speed (it is dead to them after the failure timeout; nothing waits on it).
// Resumed, it is the same process and incarnation: it is "alive again" to
// them, catches up (from their logs, or a snapshot when it fell out of them),
// trains its remaining steps, and all three end identical.
TEST(GossipFault, WorkerStoppedForAMinuteComesBackAndAllEndIdentical) {
  // w0 and w1 must still train when w2 resumes, about 70 s in, and end soon
  // after: every step past that is test time. Machines differ by 2x and more
  // (260 to 690 steps/s with three running, measured on this VM class), and
  // a calibration run before it measured 1.4x too few steps on a busy CI
  // machine (20,610 at 70 s; w0 took 28,854 before 68 s). So their steps have a floor
  // (--fault-slow-step-ms: at most 250 steps/s) and 20,000 steps last 80 s
  // at least, whatever the machine; a slower machine only takes longer.
  const int kFloorMs = 4;
  const uint64_t steps = 20000;
  const std::vector<std::string> slow_end = {"--epochs", "1000", "--quiesce-timeout-s", "600"};
  Cluster c(3);
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> flags = {"--max-steps", absl::StrCat(steps), "--fault-slow-step-ms",
                                      absl::StrCat(kFloorMs)};
    flags.insert(flags.end(), slow_end.begin(), slow_end.end());
    c.Start(i, 3, flags);
  }
  std::vector<std::string> flags2 = {"--max-steps", "2000"};
  flags2.insert(flags2.end(), slow_end.begin(), slow_end.end());
  c.Start(2, 3, flags2);
  ASSERT_TRUE(c.WaitForSteps(2, 100)) << c.Err(2);
  const double before = StepRate(c, 0, milliseconds(5000));
  c.process(2).Signal(SIGSTOP);
  const auto stopped = Clock::now();
  std::this_thread::sleep_for(seconds(5));  // past the failure timeout (1.5 s)
  const double during = StepRate(c, 0, milliseconds(10000));
  std::optional<v1::NodeStatus> s0 = c.Status(0);
  ASSERT_TRUE(s0.has_value());
  bool w2_dead = false;
  for (const v1::MemberStatus& m : s0->members())
    w2_dead |= m.node_id() == "w2" && m.state() == "dead";
  EXPECT_TRUE(w2_dead) << s0->DebugString();
  std::this_thread::sleep_until(stopped + seconds(60));
  std::optional<v1::NodeStatus> at_resume;
  for (int tries = 0; tries < 10 && !at_resume && !c.process(0).Poll(); ++tries) {
    at_resume = c.Status(0);
  }
  c.process(2).Signal(SIGCONT);
  const std::string rates =
      absl::StrCat("w0 steps/s before ", before, ", while w2 stopped ", during, "; ran ", steps,
                   " steps of at least ", kFloorMs, " ms");
  ASSERT_TRUE(at_resume.has_value()) << "w0 answers no status when w2 resumes (" << rates << ")\n"
                                     << c.Logs();
  ASSERT_LT(at_resume->local_steps(), steps)
      << "w0 is past its steps when w2 resumes: the step's floor did not hold (" << rates << ")";
  int codes[3];
  for (int i = 0; i < 3; ++i) codes[i] = c.Wait(i, seconds(600));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(codes[i], 0) << "w" << i << " failed\n" << c.Logs();
  c.ExpectIdentical({0, 1, 2});
  const std::string s2 = c.Summary(2);
  for (const auto& [origin, seq] : Versions(s2)) {
    EXPECT_EQ(seq, origin.rfind("w2#", 0) == 0 ? 2000u : steps) << origin;
  }
  // Nothing waits on the stopped worker: were w0 held by it (backpressure,
  // a lag bound, a quiescence wait), its rate would fall towards zero. Not a
  // speed target: with a core freed, w0 usually gains or holds its floor's
  // rate, but beside the suite's container build it measured 0.88x once
  // (2026-11-26: 401 -> 353, before the floor), so the bound is half.
  EXPECT_GE(during, 0.5 * before) << "steps/s before " << before << ", while w2 stopped " << during;
  std::printf(
      "FIGURES stopped-60s: w0 steps/s before %.0f, while w2 stopped %.0f (%.2fx); w0 and w1 ran "
      "%llu steps (floor %d ms); w2 snapshots_loaded %.0f; repairs_sent w0 %.0f w1 %.0f\n",
      before, during, during / before, static_cast<unsigned long long>(steps), kFloorMs,
      Counter(s2, "snapshots_loaded"), Counter(c.Summary(0), "repairs_sent"),
      Counter(c.Summary(1), "repairs_sent"));
}

// The issue's own scenario, three times in a row: four workers of the
// default model (784-512-512-10, all cores each) on a machine loaded with a
// busy loop per core; kill -9 of one mid-training, restarted 5 s later.
// Every survivor answers status throughout, the restarted worker joins from
// a striped snapshot (never from the seed's weights), and all four end
// identical.
TEST(GossipFault, KillAndRestartWithTheDefaultModelOnALoadedMachine) {
  CpuLoad load(static_cast<int>(std::thread::hardware_concurrency()));
  ASSERT_GT(load.size(), 0u);
  for (int round = 1; round <= 3; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    Cluster c(4, {"--backend", "cpu", "--epochs", "3", "--progress", "off", "--quiesce-timeout-s",
                  "300"});
    for (int i = 0; i < 4; ++i) c.Start(i, 4, {});
    ASSERT_TRUE(c.WaitForSteps(3, 60, seconds(120))) << c.Err(3);
    c.process(3).Signal(SIGKILL);
    ASSERT_EQ(c.Wait(3, seconds(10)), 128 + SIGKILL);
    const size_t first_life = c.Out(3).size();
    double slowest_status_ms = 0;
    for (int tick = 0; tick < 5; ++tick) {
      for (int i = 0; i < 3; ++i) {
        const auto t0 = Clock::now();
        absl::StatusOr<v1::NodeStatus> s = server::FetchStatus(c.address(i), milliseconds(2000));
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        slowest_status_ms = std::max(slowest_status_ms, ms);
        // A survivor that finished early may have ended: only a live one counts.
        if (!s.ok() && !c.process(i).Wait(milliseconds(1)).has_value()) {
          ADD_FAILURE() << "w" << i << " did not answer status: " << s.status();
        }
      }
      std::this_thread::sleep_for(milliseconds(700));
    }
    // The snapshot, striped (not the log's messages: a join by replay).
    c.Start(3, 4, {"--join-by-replay=false"});
    for (int i = 0; i < 4; ++i) {
      ASSERT_EQ(c.Wait(i, seconds(400)), 0) << "w" << i << ": " << c.Err(i);
    }
    c.ExpectIdentical({0, 1, 2, 3});
    const std::string second_life = c.Out(3).substr(first_life);
    EXPECT_EQ(second_life.find("starting from the seed's weights"), std::string::npos)
        << second_life;
    EXPECT_EQ(Counter(c.Summary(3), "snapshots_loaded"), 1) << c.Summary(3);
    // The default model's 5.4 MB snapshot comes in 4 stripes of one cut
    // (--snapshot-stripes 4), each on its own connection.
    EXPECT_NE(second_life.find("over 4 connections"), std::string::npos) << second_life;
    std::printf("FIGURES kill-restart round %d: slowest survivor status %.0f ms; hash %s\n", round,
                slowest_status_ms, Field(c.Summary(0), "weight_hash").substr(0, 16).c_str());
  }
}

}  // namespace
}  // namespace reckon
