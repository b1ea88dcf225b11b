// The gossip node end to end: real reckon-worker processes talking gRPC on
// loopback, training on the real Fashion-MNIST files.
// A smaller model (784-128-10) and bounded steps keep each test to seconds;
// the bounds below were set from runs of this exact setup.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/process.h"
#include "server/grpc_transport.h"
#include "tests/gossip_harness.h"
#include "tests/test_process.h"
#include "worker/checkpoint.h"
#include "worker/dataset.h"
#include "worker/npy.h"

namespace reckon {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Cluster;
using testing::Counter;
using testing::Field;
using testing::Number;
using testing::Versions;

// 1. Three workers, bounded steps: at quiescence equal version vectors and
// hashes, every origin's every message applied, and the model learned.
TEST(GossipCluster, ThreeWorkersEndIdentical) {
  Cluster c(3);
  // lr 0.01: three workers push at once, and how their messages interleave
  // depends on the machine's load; at 0.02 a loaded run dipped to 65%.
  for (int i = 0; i < 3; ++i) c.Start(i, 3, {"--max-steps", "150", "--lr", "0.01"});
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.Wait(i), 0) << c.Err(i);
  c.ExpectIdentical({0, 1, 2});
  const std::string s = c.Summary(0);
  const auto vv = Versions(s);
  ASSERT_EQ(vv.size(), 3u) << s;
  for (const auto& [origin, seq] : vv) EXPECT_EQ(seq, 150u) << origin;
  for (int i = 0; i < 3; ++i) {
    // Exactly once: 150 messages from each of the two peers.
    EXPECT_EQ(Counter(c.Summary(i), "updates_applied"), 300) << c.Summary(i);
    EXPECT_EQ(Counter(c.Summary(i), "decode_errors"), 0);
  }
  // 450 steps of 100 samples on a 784-128-10 MLP. The initial model scores
  // about 10%; a replica that missed its peers' updates stays far below.
  EXPECT_GT(Number(s, "test_accuracy"), 0.72) << s;
  EXPECT_GT(Number(s, "compression_ratio"), 100) << s;
}

// A replica corrupted in memory (one quantum of one weight, as a bit flip
// or a faulty device would) is found by the running check within its
// interval, the worker re-joins from a peer's snapshot, counted; all end identical.
// Meanwhile healthy replicas compare their checks and agree.
TEST(GossipCluster, CorruptedReplicaIsDetectedAndRejoins) {
  Cluster c(3);
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> extra = {"--max-steps", "2500", "--epochs", "30"};
    if (i == 1) extra.insert(extra.end(), {"--fault-corrupt-weight-at-step", "200"});
    c.Start(i, 3, extra);  // the default --check-interval-ms (2 s)
  }
  ASSERT_TRUE(c.WaitForSteps(1, 200)) << c.Err(1);
  const auto corrupted = std::chrono::steady_clock::now();
  std::optional<v1::NodeStatus> seen;
  while (std::chrono::steady_clock::now() - corrupted < seconds(60)) {
    seen = c.Status(1);
    if (seen && seen->counters().replica_check_failures() > 0) break;
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_TRUE(seen && seen->counters().replica_check_failures() > 0) << c.Err(1);
  const double detect_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - corrupted).count();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.Wait(i), 0) << "w" << i << ": " << c.Err(i);
  c.ExpectIdentical({0, 1, 2});
  const std::string s1 = c.Summary(1);
  EXPECT_EQ(Counter(s1, "replica_check_failures"), 1) << s1;
  EXPECT_EQ(Counter(s1, "replica_rejoins"), 1) << s1;
  EXPECT_EQ(Counter(s1, "snapshots_loaded"), 1) << s1;
  EXPECT_NE(c.Err(1).find("REPLICA CHECK FAILED"), std::string::npos) << c.Err(1);
  double agreed = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string s = c.Summary(i);
    EXPECT_EQ(Counter(s, "divergences"), 0) << "w" << i << ": " << s;
    EXPECT_GE(Counter(s, "replica_checks"), 1) << s;
    if (i != 1) {
      EXPECT_EQ(Counter(s, "replica_check_failures"), 0) << s;
    }
    agreed += Counter(s, "peer_checks_agreed");
  }
  EXPECT_GT(agreed, 0) << "no check was ever compared";
  std::printf(
      "FIGURES corrupted replica: failure seen in status %.2f s after the corrupting "
      "step (check interval 2 s); %g peer checks agreed in the cluster\n",
      detect_s, agreed);
}

// 2. kill -9 one of four mid-training: the others keep stepping; restarted,
// it re-joins from a snapshot as a new incarnation; all end identical.
TEST(GossipCluster, KilledWorkerRejoinsFromSnapshot) {
  Cluster c(4);
  // The survivors train on while w3 restarts and joins (seconds even under
  // the sanitizers): 5,000 steps each. w3's first life steps no faster than
  // every 20 ms, so that it is still inside its 150-step shard when killed
  // even if the others are slow to take their first steps (CI's loaded
  // cores: they were at 0 steps when w3 was at 40).
  for (int i = 0; i < 3; ++i) c.Start(i, 4, {"--max-steps", "5000", "--epochs", "35"});
  c.Start(3, 4, {"--max-steps", "5000", "--epochs", "35", "--fault-slow-step-ms", "20"});
  ASSERT_TRUE(c.WaitForSteps(3, 40)) << c.Err(3);
  // The kill comes once every survivor has stepped (or w3 is near the end
  // of its shard's epoch: then a survivor still joining is checked below).
  for (int i = 0; i < 3; ++i) {
    const auto deadline = std::chrono::steady_clock::now() + seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::optional<v1::NodeStatus> s = c.Status(i), s3 = c.Status(3);
      if ((s && s->local_steps() > 0) || (s3 && s3->local_steps() >= 60)) break;
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  const std::optional<v1::NodeStatus> first_life = c.Status(3);
  ASSERT_TRUE(first_life.has_value()) << c.Err(3);
  const uint64_t old_incarnation = first_life->incarnation();
  c.process(3).Signal(SIGKILL);
  ASSERT_EQ(c.Wait(3, seconds(10)), 128 + SIGKILL);
  // No hang: the survivors' steps keep advancing, before and after the
  // failure detector marks w3 dead (1.5 s). A survivor still joining at the
  // kill (its first probe found a seed not yet listening, so it joins the
  // others by replay or snapshot: on a loaded machine, seconds) must finish
  // that join although a member died during it; the others must not pause.
  uint64_t before[3];
  for (int i = 0; i < 3; ++i) {
    const std::optional<v1::NodeStatus> s = c.Status(i);
    before[i] = s ? s->local_steps() : 0;
  }
  std::this_thread::sleep_for(milliseconds(2000));
  int training_at_kill = 0;
  for (int i = 0; i < 3; ++i) {
    if (before[i] == 0) {
      EXPECT_TRUE(c.WaitForSteps(i, 11, seconds(30))) << "w" << i << ": " << c.Out(i) << c.Err(i);
      continue;
    }
    ++training_at_kill;
    const std::optional<v1::NodeStatus> later = c.Status(i);
    ASSERT_TRUE(later.has_value()) << "w" << i;
    EXPECT_GT(later->local_steps(), before[i] + 10) << "w" << i << ": " << c.Out(i) << c.Err(i);
  }
  std::printf("FIGURES killed worker: %d of 3 survivors were training at the kill\n",
              training_at_kill);
  std::optional<v1::NodeStatus> after = c.Status(0);
  ASSERT_TRUE(after.has_value());
  bool dead_seen = false;
  for (const v1::MemberStatus& m : after->members()) {
    if (m.node_id() == "w3") dead_seen = m.state() == "dead";
  }
  EXPECT_TRUE(dead_seen) << after->DebugString();
  // Its shard's one epoch (150 steps) over both lives: the second continues
  // where the first's published steps end.
  c.Start(3, 4, {});
  for (int i = 0; i < 4; ++i) ASSERT_EQ(c.Wait(i), 0) << "w" << i << ": " << c.Err(i);
  c.ExpectIdentical({0, 1, 2, 3});
  const std::string s3 = c.Summary(3);
  EXPECT_EQ(Counter(s3, "snapshots_loaded") + Counter(s3, "joins_by_replay"), 1) << s3;
  EXPECT_GT(Number(s3, "incarnation"), double(old_incarnation));
  // Both lives of w3 are origins in the final vector.
  int w3_origins = 0;
  uint64_t w3_steps = 0;
  for (const auto& [origin, seq] : Versions(s3)) {
    if (origin.rfind("w3#", 0) == 0) {
      ++w3_origins;
      w3_steps += seq;
    }
  }
  EXPECT_EQ(w3_origins, 2) << Field(s3, "version_vector");
  EXPECT_GE(w3_steps, 150u) << Field(s3, "version_vector");
  EXPECT_LE(w3_steps, 151u) << Field(s3, "version_vector");
  // w0 trained beside three others: its momentum rule was matched to four.
  const std::string s0 = c.Summary(0);
  EXPECT_EQ(Field(s0, "momentum_matched"), "true") << s0;
  EXPECT_EQ(Number(s0, "max_training_members"), 4) << s0;
}

// A worker killed (-9) and restarted continues its shard where the steps its
// earlier life published end (the cluster holds them: that life's entry in
// the version vector), instead of starting its epochs again: over both
// lives it publishes its planned steps (2 epochs of 300), give or take the
// one the kill cut. It used to publish its earlier steps again on top, so
// the data the cluster learned from leaned towards the workers that crashed.
TEST(GossipCluster, RestartedWorkerContinuesItsShardWhereItsEarlierLifeStopped) {
  Cluster c(2);
  for (int i = 0; i < 2; ++i) c.Start(i, 2, {"--epochs", "2"});
  ASSERT_TRUE(c.WaitForSteps(1, 150)) << c.Err(1);
  c.process(1).Signal(SIGKILL);
  ASSERT_EQ(c.Wait(1, seconds(10)), 128 + SIGKILL);
  const size_t first_life = c.Out(1).size();
  c.Start(1, 2, {"--epochs", "2"});
  for (int i = 0; i < 2; ++i) ASSERT_EQ(c.Wait(i), 0) << "w" << i << ": " << c.Err(i);
  c.ExpectIdentical({0, 1});
  uint64_t w0 = 0, w1 = 0;
  int w1_lives = 0;
  for (const auto& [origin, seq] : Versions(c.Summary(1))) {
    if (origin.rfind("w0#", 0) == 0) w0 += seq;
    if (origin.rfind("w1#", 0) == 0) {
      w1 += seq;
      ++w1_lives;
    }
  }
  EXPECT_EQ(w0, 600u);
  EXPECT_EQ(w1_lives, 2);
  EXPECT_GE(w1, 600u) << Field(c.Summary(1), "version_vector");
  EXPECT_LE(w1, 602u) << Field(c.Summary(1), "version_vector");
  const std::string second_life = c.Out(1).substr(first_life);
  EXPECT_NE(second_life.find("steps of shard 1/2 published by its earlier lives: continues at"),
            std::string::npos)
      << second_life;
}

// A fork once seen: a worker restarted while its peers cannot answer
// (stopped here; starved of CPU where it was seen) must not start from the
// seed's weights on that silence. It keeps probing, says so, and joins from a
// snapshot once they answer; all end identical.
TEST(GossipCluster, RestartedWorkerWaitsForPeersThatDoNotAnswer) {
  Cluster c(3);
  // w0 and w1 must still be training when w2 is back: ~2,000 steps left
  // after the freeze, seconds at this model's speed.
  for (int i = 0; i < 3; ++i) c.Start(i, 3, {"--max-steps", "2000", "--epochs", "30"});
  ASSERT_TRUE(c.WaitForSteps(2, 40)) << c.Err(2);
  c.process(2).Signal(SIGKILL);
  ASSERT_EQ(c.Wait(2, seconds(10)), 128 + SIGKILL);
  c.process(0).Signal(SIGSTOP);
  c.process(1).Signal(SIGSTOP);
  const size_t first_life = c.Out(2).size();  // its log is appended to
  // --max-steps counts both lives' steps: about 80 left for this one.
  c.Start(2, 3, {"--max-steps", "120", "--join-timeout-s", "60"});
  // Longer than the old single round of 1 s probes per seed, and than its 80
  // steps: a worker that joined nobody must neither train nor exit meanwhile.
  EXPECT_FALSE(c.process(2).Wait(seconds(8)).has_value()) << "w2 exited alone: " << c.Err(2);
  const std::string waiting = c.Out(2).substr(first_life);
  c.process(0).Signal(SIGCONT);
  c.process(1).Signal(SIGCONT);
  EXPECT_EQ(waiting.find("starting from the seed's weights"), std::string::npos) << waiting;
  EXPECT_NE(waiting.find("waiting for the seeds to answer"), std::string::npos) << waiting;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.Wait(i), 0) << "w" << i << ": " << c.Err(i);
  c.ExpectIdentical({0, 1, 2});
  EXPECT_EQ(Counter(c.Summary(2), "snapshots_loaded") + Counter(c.Summary(2), "joins_by_replay"), 1)
      << c.Summary(2);
}

// A worker whose seeds never answer: without --bootstrap it does not start
// (exit 1 at --join-timeout-s, saying why); with it, it trains but never
// calls its lone replica the cluster's: exit 1 at --quiesce-timeout-s.
TEST(GossipCluster, WorkerThatReachesNobodyNeverExitsZero) {
  Cluster c(2);  // slot 1's port is never listened on
  c.Start(0, 2, {"--max-steps", "20", "--join-timeout-s", "3"});
  EXPECT_EQ(c.Wait(0, seconds(30)), 1) << c.Err(0);
  EXPECT_NE(
      c.Err(0).find("no conclusive answer from the seeds in 3 s (no answer from " + c.address(1)),
      std::string::npos)
      << c.Err(0);
  EXPECT_TRUE(c.Summary(0).empty());

  c.Start(0, 2, {"--max-steps", "20", "--bootstrap", "--quiesce-timeout-s", "3"});
  EXPECT_EQ(c.Wait(0, seconds(30)), 1) << c.Err(0);
  EXPECT_NE(c.Err(0).find("cluster not quiescent before the deadline: never reached any member "
                          "of the cluster"),
            std::string::npos)
      << c.Err(0);
  EXPECT_EQ(c.Out(0).find("cluster quiescent"), std::string::npos) << c.Out(0);
  EXPECT_TRUE(c.Summary(0).empty());
}

// SIGTERM (Kubernetes, systemd) ends a worker promptly wherever it waits,
// and one stopped before the run is done says so and exits 3, not 0: while
// it waits for seeds that never answer (it used to ignore SIGTERM there and
// probe until SIGKILL), and while it waits for the cluster to agree (it used
// to log "cluster quiescent" and exit 0 with a replica that was not final).
TEST(GossipCluster, SigtermEndsEveryWaitAndAWorkerNotDoneSaysSo) {
  Cluster c(2);  // slot 1's port is never listened on
  c.Start(0, 2, {"--max-steps", "20"});
  ASSERT_TRUE(c.WaitForOutput(0, "waiting for the seeds to answer")) << c.Out(0) << c.Err(0);
  c.process(0).Signal(SIGTERM);
  EXPECT_EQ(c.Wait(0, seconds(5)), 3) << c.Err(0);
  EXPECT_NE(c.Out(0).find("stopped by a signal (SIGTERM from pid " + std::to_string(getpid())),
            std::string::npos)
      << c.Out(0);
  EXPECT_NE(c.Out(0).find(") while joining (round "), std::string::npos) << c.Out(0);
  EXPECT_TRUE(c.Summary(0).empty());

  // Alone (--bootstrap), it trains its 20 steps and then waits for a
  // cluster that never comes.
  c.Start(0, 2, {"--max-steps", "20", "--bootstrap"});
  ASSERT_TRUE(c.WaitForOutput(0, "waiting for the cluster to be quiescent")) << c.Err(0);
  c.process(0).Signal(SIGTERM);
  EXPECT_EQ(c.Wait(0, seconds(5)), 3) << c.Err(0);
  EXPECT_EQ(c.Out(0).find("cluster quiescent"), std::string::npos) << c.Out(0);
  EXPECT_NE(c.Out(0).find("before the cluster agreed it is done: this replica"), std::string::npos)
      << c.Out(0);
  const std::string summary = c.Summary(0);
  ASSERT_FALSE(summary.empty()) << c.Err(0);
  EXPECT_EQ(Field(summary, "final"), "false") << summary;
  EXPECT_EQ(Field(summary, "stopped_early"), "true") << summary;
  ASSERT_EQ(Versions(summary).size(), 1u) << summary;
  EXPECT_EQ(Versions(summary).begin()->second, 20u) << summary;
}

// Supervised layer-wise pre-training in a cluster (--pretrain-samples): the
// worker of shard 0 pre-trains alone and publishes the result as one dense
// Update; the others, though every seed answers "not trained", never step
// from the seed's weights: they wait and join from a snapshot holding it.
TEST(GossipCluster, ShardZeroPublishesThePretrainedStartAndTheOthersJoinFromIt) {
  Cluster c(3);
  const std::vector<std::string> flags = {
      "--layers",           "784,64,64,10", "--activation",   "sigmoid", "--lr",        "0.1",
      "--pretrain-samples", "4000",         "--warmup-batch", "25",      "--max-steps", "100"};
  for (int i = 0; i < 3; ++i) c.Start(i, 3, flags);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.Wait(i), 0) << "w" << i << ": " << c.Err(i);
  c.ExpectIdentical({0, 1, 2});
  const std::string s0 = c.Summary(0);
  EXPECT_EQ(Field(s0, "pretrained"), "true") << s0;
  const double params = 784 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10;
  EXPECT_GT(Number(s0, "pretrain_start_bytes"), 4 * params) << s0;  // dense fp32
  EXPECT_LT(Number(s0, "pretrain_start_bytes"), 4 * params + 1000) << s0;
  // Pre-training runs on w0 alone, so what it reaches is the same every run
  // (72.28% on its own pass when written).
  const std::string out0 = c.Out(0);
  const std::string stage2 = "pre-training stage 2 of 2 (784,64,64,10/sigmoid): 4000 samples";
  const size_t stage2_at = out0.find(stage2);
  ASSERT_NE(stage2_at, std::string::npos) << out0;
  const size_t accuracy_at = out0.find("training accuracy ", stage2_at);
  ASSERT_NE(accuracy_at, std::string::npos) << out0;
  EXPECT_GT(std::stod(out0.substr(accuracy_at + std::strlen("training accuracy "))), 65.0) << out0;
  for (int i = 1; i < 3; ++i) {
    const std::string s = c.Summary(i);
    EXPECT_EQ(Field(s, "pretrained"), "false") << s;
    EXPECT_EQ(Counter(s, "snapshots_loaded") + Counter(s, "joins_by_replay"), 1)
        << s << "\nw" << i << "'s log:\n"
        << c.Out(i) << c.Err(i);
    EXPECT_EQ(c.Out(i).find("starting from the seed's weights"), std::string::npos) << c.Out(i);
  }
  // The start is w0's message 1: its steps are 2 to 101.
  for (const auto& [origin, seq] : Versions(s0)) {
    EXPECT_EQ(seq, origin.rfind("w0#", 0) == 0 ? 101u : 100u) << origin;
  }
  // The 100 asynchronous steps after it land in an order the scheduler
  // picks: 0.64 to 0.81 over ten runs (2026-11-27), so this only says the
  // start was not lost (chance is 0.10).
  EXPECT_GT(Number(s0, "test_accuracy"), 0.50) << s0;
}

// Strom's fewer workers at the start (--start-workers 1): w0 trains the
// warm-up (half its first epoch in minibatches of 25: 400 steps) alone; w1
// and w2 wait, join from a snapshot holding at least those 400 messages, and
// train their first epoch without the ramp. All end identical.
TEST(GossipCluster, WorkersBeyondStartWorkersJoinAfterTheWarmUp) {
  Cluster c(3);
  for (int i = 0; i < 3; ++i) {
    c.Start(i, 3,
            {"--start-workers", "1", "--warmup-batch", "25", "--warmup-fraction", "0.5",
             "--max-steps", "600", "--epochs", "3", "--lr", "0.01"});
  }
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.Wait(i), 0) << "w" << i << ": " << c.Err(i);
  c.ExpectIdentical({0, 1, 2});
  const std::string s0 = c.Summary(0);
  EXPECT_EQ(Number(s0, "samples"), 400 * 25 + 200 * 100) << s0;
  for (int i = 1; i < 3; ++i) {
    const std::string s = c.Summary(i);
    EXPECT_EQ(Number(s, "samples"), 600 * 100) << "w" << i << " had no ramp: " << s;
    EXPECT_EQ(Counter(s, "snapshots_loaded") + Counter(s, "joins_by_replay"), 1)
        << s << "\nw" << i << "'s log:\n"
        << c.Out(i) << c.Err(i);
    const std::string out = c.Out(i);
    const size_t at = out.find("messages applied;");
    ASSERT_NE(at, std::string::npos) << out;
    const size_t from = out.rfind(", ", at) + 2;
    EXPECT_GE(std::stoi(out.substr(from, at - from)), 400) << out;
  }
  EXPECT_GT(Number(s0, "test_accuracy"), 0.72) << s0;
}

// 3. A worker that joins late catches up (snapshot) and ends identical.
TEST(GossipCluster, LateJoinerCatchesUp) {
  Cluster c(3);
  // w0 and w1 must still be there when w2 has started (a process start is
  // 1-2 s here: libraries, the dataset): ~1,100 steps of margin.
  // --bootstrap: w2 is a seed of theirs that will not answer before they
  // train (without it they would wait for it: silence is not evidence).
  c.Start(0, 3, {"--max-steps", "1200", "--epochs", "8", "--bootstrap"});
  c.Start(1, 3, {"--max-steps", "1200", "--epochs", "8", "--bootstrap"});
  ASSERT_TRUE(c.WaitForSteps(0, 80)) << c.Err(0);
  c.Start(2, 3, {"--max-steps", "80"});
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.Wait(i), 0) << "w" << i << ": " << c.Err(i);
  c.ExpectIdentical({0, 1, 2});
  EXPECT_EQ(Counter(c.Summary(2), "snapshots_loaded") + Counter(c.Summary(2), "joins_by_replay"), 1)
      << c.Summary(2);
  for (const auto& [origin, seq] : Versions(c.Summary(2))) {
    EXPECT_EQ(seq, origin.rfind("w2#", 0) == 0 ? 80u : 1200u) << origin;
  }
}

// --after-training serve (Kubernetes, Compose): w0 and w1 finish, report and
// serve on; w2 starts only then, joins from a snapshot, trains, and the
// cluster quiesces again with the servers taking part: w2 exits 0 with every
// update, and the servers' replicas hold w2's updates too; they rewrite their
// summaries at that second agreement, so all three report one final replica.
TEST(GossipCluster, WorkerJoiningServingPeersAfterTheyFinishedEndsIdentical) {
  Cluster c(3);
  ::reckon::testing::ScratchDir scratch;
  const std::string checkpoint = (scratch / "w0.ck").string();
  c.Start(0, 3,
          {"--max-steps", "40", "--bootstrap", "--after-training", "serve", "--checkpoint",
           checkpoint});
  c.Start(1, 3, {"--max-steps", "40", "--bootstrap", "--after-training", "serve"});
  for (int i = 0; i < 2; ++i) {
    for (int t = 0; t < 600 && c.Summary(i).empty(); ++t)
      std::this_thread::sleep_for(milliseconds(100));
    ASSERT_FALSE(c.Summary(i).empty()) << c.Logs();
  }
  c.Start(2, 3, {"--max-steps", "30"});
  ASSERT_EQ(c.Wait(2, seconds(120)), 0) << c.Logs();
  for (const auto& [origin, seq] : Versions(c.Summary(2))) {
    EXPECT_EQ(seq, origin.rfind("w2#", 0) == 0 ? 30u : 40u) << origin;
  }
  // The servers applied w2's updates: their replicas are w2's.
  const std::string w2_hash = Field(c.Summary(2), "weight_hash");
  for (int i = 0; i < 2; ++i) {
    std::optional<v1::NodeStatus> status = c.Status(i);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(status->weight_hash(), w2_hash) << "w" << i;
    EXPECT_TRUE(c.WaitForOutput(i, "cluster agreed again (agreement 2: 30 more steps")) << c.Out(i);
  }
  // w0's checkpoint followed: it holds the second agreement's replica.
  ASSERT_TRUE(c.WaitForOutput(0, "holds the cluster's final replica (agreement 2)")) << c.Out(0);
  absl::StatusOr<worker::StoredCheckpoint> stored = worker::LoadCheckpoint(checkpoint);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->header.weight_hash(), w2_hash);
  for (int i = 0; i < 2; ++i) {
    c.process(i).Signal(SIGTERM);
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ(c.Wait(i, seconds(30)), 0) << c.Logs();
  c.ExpectIdentical({0, 1, 2});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Field(c.Summary(i), "agreements"), i < 2 ? "2" : "1") << c.Summary(i);
  }
}

// 4. An origin dies right after sending an Update to one peer only: the
// other live replica still gets it (anti-entropy from the one that has it).
TEST(GossipCluster, UpdateOfDeadOriginReachesEveryone) {
  Cluster c(3);
  c.Start(0, 3, {"--max-steps", "200", "--fault-die-after-partial-send", "30"});
  c.Start(1, 3, {"--max-steps", "200"});
  c.Start(2, 3, {"--max-steps", "200"});
  EXPECT_EQ(c.Wait(0), 86) << c.Err(0);
  EXPECT_NE(c.Err(0).find("sending seq 30 to"), std::string::npos) << c.Err(0);
  ASSERT_EQ(c.Wait(1), 0) << c.Err(1);
  ASSERT_EQ(c.Wait(2), 0) << c.Err(2);
  c.ExpectIdentical({1, 2});
  for (int i : {1, 2}) {
    int found = 0;
    for (const auto& [origin, seq] : Versions(c.Summary(i))) {
      if (origin.rfind("w0#", 0) == 0) {
        EXPECT_EQ(seq, 30u) << "w" << i;
        ++found;
      }
    }
    EXPECT_EQ(found, 1);
  }
  // Exactly one of them had it and repaired the other.
  EXPECT_GE(Counter(c.Summary(1), "repairs_sent") + Counter(c.Summary(2), "repairs_sent"), 1);
}

// 5. Links that duplicate, delay and so reorder Updates: each is applied
// exactly once, in order, and the replicas end identical.
TEST(GossipCluster, DuplicatedReorderedDelayedUpdatesAppliedOnce) {
  Cluster c(3);
  const std::vector<std::string> faults = {"--max-steps",   "150", "--fault-duplicate",    "0.3",
                                           "--fault-delay", "0.4", "--fault-max-delay-ms", "150"};
  for (int i = 0; i < 3; ++i) c.Start(i, 3, faults);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.Wait(i), 0) << c.Err(i);
  c.ExpectIdentical({0, 1, 2});
  double duplicates = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string s = c.Summary(i);
    EXPECT_EQ(Counter(s, "updates_applied"), 300) << s;
    duplicates += Counter(s, "duplicates_dropped");
    for (const auto& [origin, seq] : Versions(s)) EXPECT_EQ(seq, 150u);
  }
  EXPECT_GT(duplicates, 10);  // the faults really happened
}

// 6a. A peer of another cluster (another model) is refused: it stops with a
// clear error and the node it contacted logs why.
TEST(GossipCluster, PeerWithAnotherFingerprintIsRefused) {
  Cluster c(2);
  // w0 trains until told to stop, so it is surely there when w1 arrives.
  c.Start(0, 2, {"--max-steps", "100000", "--epochs", "1000", "--bootstrap"});
  ASSERT_TRUE(c.WaitForSteps(0, 5)) << c.Err(0);
  c.Start(1, 2, {"--max-steps", "50", "--layers", "784,64,10"});
  EXPECT_EQ(c.Wait(1, seconds(60)), 1) << c.Err(1);
  c.process(0).Signal(SIGTERM);  // stop, leave, exit 3 (stopped before its run was done)
  const std::string reason =
      "cluster fingerprint mismatch: model is 784,64,10/relu on 'w1' but 784,128,10/relu on 'w0'";
  EXPECT_NE(c.Err(1).find("refused by peer " + c.address(0) + ": "), std::string::npos) << c.Err(1);
  EXPECT_NE(c.Err(1).find(reason), std::string::npos) << c.Err(1);
  ASSERT_EQ(c.Wait(0), 3) << c.Err(0);
  EXPECT_NE(c.Err(0).find("refusing a snapshot to 'w1'"), std::string::npos) << c.Err(0);
  EXPECT_NE(c.Err(0).find(reason), std::string::npos) << c.Err(0);
}

// Workers given different data do not train one model together: the
// fingerprint carries the data's identity (worker/data_identity.h), and a
// copy of Fashion-MNIST with one test label changed is refused, naming it.
TEST(GossipCluster, PeerGivenOtherDataIsRefusedNamingIt) {
  Cluster c(2);
  const std::filesystem::path other =
      std::filesystem::path(c.summary_path(0)).parent_path() / "other";
  std::filesystem::create_directories(other);
  const std::string fmnist = "/usr/share/datasets/fashion-mnist/";
  for (const char* f :
       {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz"}) {
    std::filesystem::copy_file(fmnist + f, other / f);
  }
  absl::StatusOr<worker::IdxArray> labels =
      worker::ReadIdx(fmnist + "t10k-labels-idx1-ubyte.gz", 1);
  ASSERT_TRUE(labels.ok()) << labels.status();
  std::string idx = {0, 0, 8, 1, 0, 0, 0x27, 0x10};  // 10,000 labels
  idx.append(labels->data.begin(), labels->data.end());
  idx.back() = static_cast<char>((idx.back() + 1) % 10);
  std::ofstream((other / "t10k-labels-idx1-ubyte").string(), std::ios::binary) << idx;

  c.Start(0, 2, {"--max-steps", "100000", "--epochs", "1000", "--bootstrap"});
  ASSERT_TRUE(c.WaitForSteps(0, 5)) << c.Err(0);
  c.Start(1, 2, {"--max-steps", "50", "--data-dir", other.string()});
  EXPECT_EQ(c.Wait(1, seconds(60)), 1) << c.Err(1);
  c.process(0).Signal(SIGTERM);
  ASSERT_EQ(c.Wait(0), 3) << c.Err(0);
  EXPECT_NE(c.Err(1).find("cluster fingerprint mismatch: the training data is 'idx train 60000 "
                          "test 10000 "),
            std::string::npos)
      << c.Err(1);
}

// 6b. A malformed Update (payload not matching its CRC) is dropped and
// counted, never applied, and the good copy after it on the same stream is.
TEST(GossipCluster, MalformedUpdateDroppedAndCounted) {
  Cluster c(2);
  c.Start(0, 2, {"--max-steps", "100", "--fault-corrupt-seq", "5"});
  c.Start(1, 2, {"--max-steps", "100"});
  ASSERT_EQ(c.Wait(0), 0) << c.Err(0);
  ASSERT_EQ(c.Wait(1), 0) << c.Err(1);
  c.ExpectIdentical({0, 1});
  const std::string s1 = c.Summary(1);
  EXPECT_EQ(Counter(s1, "decode_errors"), 1) << s1;
  EXPECT_EQ(Counter(s1, "updates_applied"), 100) << s1;
  EXPECT_NE(c.Err(1).find("seq 5 from w0: CRC-32C mismatch"), std::string::npos) << c.Err(1);
}

// Flags: peers mode needs a valid node id and a codec reckon knows.
TEST(GossipCluster, PeerFlagsAreChecked) {
  testing::ScratchDir dir;
  testing::ProcessResult r = testing::RunProcess(
      RECKON_WORKER_PATH, {"--node-id", "w 1", "--listen", "127.0.0.1:0"}, dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--node-id 'w 1' must be"), std::string::npos) << r.err;
  r = testing::RunProcess(RECKON_WORKER_PATH, {"--node-id", "w1", "--codec", "8bit"}, dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--codec '8bit' is not threshold, onebit, dyntree8 or dense"),
            std::string::npos)
      << r.err;
  r = testing::RunProcess(RECKON_WORKER_PATH, {"--node-id", "w1", "--peers", "nohostport"},
                          dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--peers entry 'nohostport' is not host:port"), std::string::npos) << r.err;
  r = testing::RunProcess(RECKON_WORKER_PATH, {"--node-id", "w1", "--resume", "x.ck"}, dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--resume is for --standalone"), std::string::npos) << r.err;
}

// Mutual TLS and signed updates end to end: `reckonctl certs` makes the CA
// and the certificates, three workers train over TLS, every Update signed
// and verified, and end identical; reckonctl status needs a certificate.
// Certificates that do not fit are refused before anything listens.
TEST(GossipCluster, WorkersTrainOverMutualTlsWithSignedUpdates) {
  testing::ScratchDir dir;
  const std::string certs = (dir / "certs").string();
  testing::ProcessResult made = testing::RunProcess(
      RECKONCTL_PATH, {"certs", "--out", certs, "--nodes", "w0,w1,w2"}, dir.path());
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto tls = [&](const std::string& who) {
    return std::vector<std::string>{"--tls-cert", certs + "/" + who + ".pem",
                                    "--tls-key",  certs + "/" + who + ".key",
                                    "--tls-ca",   certs + "/ca.pem"};
  };
  Cluster c(3);
  c.SetStatusTls(
      *server::LoadTls(certs + "/ca.pem", certs + "/reckonctl.pem", certs + "/reckonctl.key"));
  for (int i = 0; i < 3; ++i) {
    // Long enough (several seconds) for the status queries below to find it running.
    std::vector<std::string> extra = {"--max-steps", "2000", "--epochs", "10"};
    for (const std::string& f : tls(absl::StrCat("w", i))) extra.push_back(f);
    c.Start(i, 3, extra);
  }
  ASSERT_TRUE(c.WaitForSteps(0, 20)) << c.Err(0);
  // The operator's status over TLS answers; a plain one does not.
  std::vector<std::string> status_args = {"status", "--peer", c.address(0)};
  for (const std::string& f : tls("reckonctl")) status_args.push_back(f);
  testing::ProcessResult status = testing::RunProcess(RECKONCTL_PATH, status_args, dir.path());
  testing::ProcessResult plain =
      testing::RunProcess(RECKONCTL_PATH, {"status", "--peer", c.address(0)}, dir.path());
  EXPECT_NE(plain.exit_code, 0) << plain.out;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.Wait(i), 0) << "w" << i << ": " << c.Err(i);
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("\"node_id\": \"w0\""), std::string::npos) << status.out;
  c.ExpectIdentical({0, 1, 2});
  for (int i = 0; i < 3; ++i) {
    const std::string s = c.Summary(i);
    EXPECT_EQ(Counter(s, "signature_errors"), 0) << s;
    EXPECT_EQ(Counter(s, "updates_applied"), 4000) << s;  // 2,000 of each peer, each verified
  }
  // w1's certificate under --node-id w0: refused at start, naming both.
  std::vector<std::string> wrong = {"--node-id", "w0", "--listen", "127.0.0.1:0"};
  for (const std::string& f : tls("w1")) wrong.push_back(f);
  testing::ProcessResult r = testing::RunProcess(RECKON_WORKER_PATH, wrong, dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is for 'w1', not --node-id 'w0'"), std::string::npos) << r.err;
  r = testing::RunProcess(RECKON_WORKER_PATH, {"--node-id", "w0", "--tls-cert", certs + "/w0.pem"},
                          dir.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--tls-cert, --tls-key and --tls-ca go together"), std::string::npos)
      << r.err;
}

// A memory cgroup of its own for a child process (v1's memory controller,
// or v2's), under this process's: what a container's memory limit is.
// Removed when destroyed (its processes have exited by then).
class MemoryCgroup {
 public:
  // Empty `error()`: made, with `limit_bytes`; else why not.
  explicit MemoryCgroup(uint64_t limit_bytes) {
    std::ifstream cgroups("/proc/self/cgroup");
    std::string line, v1_path, v2_path;
    while (std::getline(cgroups, line)) {
      const size_t a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (controllers == "memory") v1_path = path;
      if (line.rfind("0::", 0) == 0) v2_path = path;
    }
    std::string limit_file;
    if (!v1_path.empty() &&
        std::filesystem::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
      dir_ =
          absl::StrCat("/sys/fs/cgroup/memory", v1_path, "/reckon-test-", getpid(), "-", ++made_);
      limit_file = "memory.limit_in_bytes";
    } else if (std::filesystem::exists("/sys/fs/cgroup/cgroup.controllers")) {
      dir_ = absl::StrCat("/sys/fs/cgroup", v2_path, "/reckon-test-", getpid(), "-", ++made_);
      limit_file = "memory.max";
    } else {
      error_ = "no memory cgroup controller is mounted";
      return;
    }
    std::error_code ec;
    if (!std::filesystem::create_directory(dir_, ec) || ec) {
      error_ = absl::StrCat("cannot create ", dir_, ": ", ec ? ec.message() : "it exists");
      dir_.clear();
      return;
    }
    std::ofstream(absl::StrCat(dir_, "/", limit_file)) << limit_bytes;
    std::ifstream read_back(absl::StrCat(dir_, "/", limit_file));
    uint64_t set = 0;
    read_back >> set;
    if (set != limit_bytes) error_ = absl::StrCat(dir_, "/", limit_file, " did not take the limit");
  }
  ~MemoryCgroup() {
    if (dir_.empty()) return;
    for (int i = 0; i < 100 && rmdir(dir_.c_str()) != 0; ++i) {
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  const std::string& error() const { return error_; }
  // How often its usage met the limit (and the kernel reclaimed to stay
  // under it): v1's memory.failcnt, v2's memory.events "max".
  uint64_t TimesAtTheLimit() const {
    std::ifstream v1(absl::StrCat(dir_, "/memory.failcnt"));
    uint64_t n = 0;
    if (v1 >> n) return n;
    std::ifstream v2(absl::StrCat(dir_, "/memory.events"));
    for (std::string key; v2 >> key >> n;) {
      if (key == "max") return n;
    }
    return 0;
  }
  // A command prefix that moves the process it runs into this cgroup and
  // then execs the rest (Cluster::Place's exec prefix).
  std::vector<std::string> ExecPrefix() const {
    return {"/bin/sh", "-c",
            absl::StrCat("echo $$ > ", dir_, "/cgroup.procs && exec \"$0\" \"$@\"")};
  }

 private:
  static inline int made_ = 0;  // cgroups this process made: each its own name
  std::string dir_, error_;
};

// Issue 35: two workers train on NumPy shards nearly four times each one's
// memory limit (a cgroup's, as a container's), mapped and read as
// they train, and end identical. The same limit kills a worker that reads
// the data into memory (--data-in-memory): the limit is real.
TEST(GossipCluster, WorkersTrainOnNumpyDataLargerThanTheirMemoryLimit) {
  constexpr uint64_t kLimit = uint64_t{128} << 20;
  MemoryCgroup probe(kLimit);
  if (!probe.error().empty()) {
    GTEST_SKIP() << "needs a memory cgroup of its own (root, a memory controller): "
                 << probe.error();
  }
  ::reckon::testing::ScratchDir scratch;
  const std::filesystem::path data = scratch / "data";
  std::filesystem::create_directories(data);
  // 800,000 samples of 640 uint8 features (512 MB, in four shards), 10
  // classes, each class lifting its own 20 features above noise.
  constexpr uint64_t kSamples = 800000, kFeatures = 640;
  auto write = [&](const std::string& name, const std::string& bytes) {
    const std::string path = (data / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    // Out of this process's page cache: the workers read it from the disk,
    // charged to their own cgroups.
    const int fd = open(path.c_str(), O_RDONLY);
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  };
  // One file pair: PREFIX_x[SUFFIX].npy and PREFIX_y[SUFFIX].npy.
  auto split = [&](const std::string& prefix, const std::string& suffix, uint64_t samples,
                   uint64_t seed) {
    std::string x(samples * kFeatures, '\0');
    std::vector<int64_t> y(samples);
    uint64_t state = seed;
    for (uint64_t i = 0; i < samples; ++i) {
      y[i] = static_cast<int64_t>(i % 10);
      uint8_t* row = reinterpret_cast<uint8_t*>(x.data()) + i * kFeatures;
      for (uint64_t j = 0; j < kFeatures; j += 8) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        const uint64_t noise = state & 0x3F3F3F3F3F3F3F3Full;  // 0 .. 63 a byte
        std::memcpy(row + j, &noise, 8);
      }
      for (uint64_t j = 0; j < 20; ++j) row[y[i] * 60 + j] += 100;
    }
    write(absl::StrCat(prefix, "_x", suffix, ".npy"),
          worker::NpyBytes(worker::NpyType::kUint8, {samples, kFeatures}, x));
    write(absl::StrCat(prefix, "_y", suffix, ".npy"),
          worker::NpyBytes(worker::NpyType::kInt64, {samples},
                           std::string(reinterpret_cast<const char*>(y.data()), y.size() * 8)));
  };
  // The training split in four shards (train_x-00000.npy, ...).
  for (int shard = 0; shard < 4; ++shard) {
    split("train", absl::StrFormat("-%05d", shard), kSamples / 4, 0x9E3779B97F4A7C15ull + shard);
  }
  split("test", "", 2000, 0xD1B54A32D192ED03ull);
  uint64_t train_bytes = 0;
  for (const auto& file : std::filesystem::directory_iterator(data)) {
    if (file.path().filename().string().rfind("train_x-", 0) == 0) train_bytes += file.file_size();
  }
  ASSERT_GT(train_bytes, 3 * kLimit);

  const std::vector<std::string> training = {
      "--data-dir", data.string(), "--layers", "640,32,10", "--epochs",
      "1",          "--max-steps", "600",      "--threads", "1"};
  Cluster c(2);
  std::vector<std::unique_ptr<MemoryCgroup>> limits;
  for (int i = 0; i < 2; ++i) {
    limits.push_back(std::make_unique<MemoryCgroup>(kLimit));
    ASSERT_EQ(limits.back()->error(), "");
    c.Place(i, c.address(i), limits.back()->ExecPrefix());
  }
  for (int i = 0; i < 2; ++i) c.Start(i, 2, training);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(c.Wait(i, seconds(240)), 0) << "w" << i << ": " << c.Err(i);
  }
  c.ExpectIdentical({0, 1});
  EXPECT_GT(Number(c.Summary(0), "test_accuracy"), 0.9) << c.Summary(0);
  // The limit bound: the kernel reclaimed the mapped pages to keep each
  // worker under it.
  for (int i = 0; i < 2; ++i) EXPECT_GT(limits[i]->TimesAtTheLimit(), 0u) << "w" << i;
  std::printf(
      "FIGURES 512 MB of NumPy data under a 128 MiB limit a worker: %.0f samples/s, at the limit "
      "%llu and %llu times\n",
      Number(c.Summary(0), "samples_per_s"),
      static_cast<unsigned long long>(limits[0]->TimesAtTheLimit()),
      static_cast<unsigned long long>(limits[1]->TimesAtTheLimit()));

  // The same limit, the data read into memory: killed (2 GB of floats).
  Cluster whole(1);
  MemoryCgroup limit(kLimit);
  ASSERT_EQ(limit.error(), "");
  whole.Place(0, whole.address(0), limit.ExecPrefix());
  std::vector<std::string> in_memory = training;
  // Alone: a cluster of one, the cluster's --peers taken away.
  in_memory.insert(in_memory.end(), {"--data-in-memory", "--peers", ""});
  whole.Start(0, 1, in_memory);
  EXPECT_EQ(whole.Wait(0, seconds(120)), 128 + SIGKILL) << whole.Err(0);
}

}  // namespace
}  // namespace reckon
