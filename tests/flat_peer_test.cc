// A peer over a framework's flat parameters (python/flat_peer.h), the core
// of reckon for PyTorch: real gossip nodes on loopback, each peer's training
// loop on a thread of its own (as each framework process has one), moving
// its parameters with an optimizer of its own.
#include "python/flat_peer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/cluster_config.h"
#if RECKON_HAVE_CUDA
#include <cuda_runtime.h>

#include "tests/gpu_skip.h"
#endif

namespace reckon::python {
namespace {

constexpr uint64_t kParams = 5000;

FlatPeerOptions Options(const std::string& id, const std::vector<std::string>& seeds) {
  FlatPeerOptions o;
  o.peers.node.node_id = id;
  o.peers.node.incarnation = 1;
  server::ClusterSpec spec;
  spec.model = "flat test: w[5000]";
  spec.param_count = kParams;
  spec.fraction_bits = 32;
  spec.seed = 1;
  o.peers.node.fingerprint = server::MakeFingerprint(spec);
  o.peers.node.seeds = seeds;
  o.peers.listen = "127.0.0.1:0";
  o.peers.bootstrap = seeds.empty();
  o.peers.node.failure_timeout = std::chrono::milliseconds(1500);
  o.peers.quiesce_timeout = std::chrono::seconds(60);
  o.threshold = 0.001;
  return o;
}

// The same start on every peer.
std::vector<float> Initial() {
  std::vector<float> w(kParams);
  for (uint64_t i = 0; i < kParams; ++i) w[i] = 0.01f * static_cast<float>((i * 37) % 101) - 0.5f;
  return w;
}

// One peer's "optimizer": gradient descent on its own quadratic, pulling
// each parameter towards a target of its own.
void OptimizerStep(std::vector<float>& params, int peer) {
  for (uint64_t i = 0; i < params.size(); ++i) {
    const float target = 0.3f * std::sin(0.001f * float(i) * float(peer + 1));
    params[i] -= 0.05f * (params[i] - target);
  }
}

// Initial() with every parameter moved: a framework that started elsewhere
// (another torch seed).
std::vector<float> OtherInitial() {
  std::vector<float> w = Initial();
  for (float& v : w) v += 0.125f;
  return w;
}

// The first peer of a cluster, three steps in (its log holds them all: a
// joiner that starts from Initial() joins by replay); `params` its
// parameters.
absl::StatusOr<std::unique_ptr<FlatPeer>> FirstPeerThreeStepsIn(std::vector<float>& params,
                                                                std::ostream& log) {
  absl::StatusOr<std::unique_ptr<FlatPeer>> p = FlatPeer::Create(Options("p0", {}), Initial(), log);
  if (!p.ok()) return p;
  params = Initial();
  for (int s = 0; s < 3; ++s) {
    OptimizerStep(params, 0);
    if (absl::Status stepped = (*p)->Step(params); !stepped.ok()) return stepped;
  }
  return p;
}

// A peer made with `options` from `initial` while `source` steps on
// `source_params` (a snapshot is cut at a step boundary).
absl::StatusOr<std::unique_ptr<FlatPeer>> JoinWhileStepping(FlatPeer& source,
                                                            std::vector<float>& source_params,
                                                            FlatPeerOptions options,
                                                            std::span<const float> initial,
                                                            std::ostream& log) {
  std::atomic<bool> joined{false};
  absl::Status stepping;
  std::thread cutting([&] {
    while (!joined.load() && stepping.ok()) {
      stepping = source.Step(source_params);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  absl::StatusOr<std::unique_ptr<FlatPeer>> joiner =
      FlatPeer::Create(std::move(options), initial, log);
  joined = true;
  cutting.join();
  if (!stepping.ok()) return stepping;
  return joiner;
}

// Two peers, the second joining while the first trains, from another start
// (so from the first's snapshot): every step each publishes what its
// optimizer changed as +-tau steps, takes the other's, and trains on the
// replica; at the end both hold the same replica, bit for bit, and the
// parameters are it.
TEST(FlatPeer, TwoFrameworkPeersEndWithTheSameReplica) {
  std::ostringstream log0, log1;
  absl::StatusOr<std::unique_ptr<FlatPeer>> p0 =
      FlatPeer::Create(Options("p0", {}), Initial(), log0);
  ASSERT_TRUE(p0.ok()) << p0.status() << "\n" << log0.str();
  std::vector<float> params0 = Initial();
  constexpr int kSteps = 150;
  std::atomic<bool> p1_started{false};
  absl::Status result0;
  std::thread training0([&] {
    for (int s = 0; s < kSteps && result0.ok(); ++s) {
      OptimizerStep(params0, 0);
      result0 = (*p0)->Step(params0);
      // Slow enough that p1 joins while p0 trains; p0 goes on meanwhile.
      if (!p1_started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (result0.ok()) result0 = (*p0)->Finish(params0);
  });
  while ((*p0)->steps() < 10) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  absl::StatusOr<std::unique_ptr<FlatPeer>> p1 =
      FlatPeer::Create(Options("p1", {(*p0)->peers().address()}), OtherInitial(), log1);
  p1_started = true;
  ASSERT_TRUE(p1.ok()) << p1.status() << "\n" << log1.str();
  // Joined from p0's snapshot: p0 had trained, from other initial weights.
  EXPECT_NE(log1.str().find("snapshot from p0"), std::string::npos) << log1.str();
  EXPECT_EQ(log1.str().find("joining by replay"), std::string::npos) << log1.str();
  std::vector<float> params1(kParams);
  ASSERT_TRUE((*p1)->ReadInto(params1).ok());
  EXPECT_NE(params1, Initial());
  EXPECT_NE(params1, OtherInitial());
  absl::Status result1;
  for (int s = 0; s < kSteps && result1.ok(); ++s) {
    OptimizerStep(params1, 1);
    result1 = (*p1)->Step(params1);
  }
  if (result1.ok()) result1 = (*p1)->Finish(params1);
  training0.join();
  ASSERT_TRUE(result0.ok()) << result0 << "\n" << log0.str();
  ASSERT_TRUE(result1.ok()) << result1 << "\n" << log1.str();
  EXPECT_EQ(*(*p0)->WeightHash(), *(*p1)->WeightHash());
  EXPECT_EQ(params0, params1);
  // The parameters are the replica, and training moved it.
  std::vector<float> replica(kParams);
  ASSERT_TRUE((*p0)->ReadInto(replica).ok());
  EXPECT_EQ(params0, replica);
  EXPECT_NE(params0, Initial());
  // Each sent a fraction of what dense float steps would have.
  for (FlatPeer* p : {p0->get(), p1->get()}) {
    EXPECT_GT(p->updates_sent(), 0u);
    EXPECT_LT(p->bytes_sent(), uint64_t{kSteps} * kParams * sizeof(float) / 10);
    std::printf(
        "FIGURES flat peer: %llu steps, %llu updates, %llu bytes sent (dense float: %llu)\n",
        static_cast<unsigned long long>(p->steps()),
        static_cast<unsigned long long>(p->updates_sent()),
        static_cast<unsigned long long>(p->bytes_sent()),
        static_cast<unsigned long long>(p->steps() * kParams * sizeof(float)));
  }
}

// A join by replay (docs/protocol.md section 5): a peer that starts from
// the weights the cluster started from, joining a peer whose log holds its
// whole cut in fewer bytes than the weights, is sent the cut's messages and
// loads no snapshot; it starts at that cut all the same. One that started
// elsewhere loads the snapshot. All three end with the same replica.
TEST(FlatPeer, AJoinerThatStartedWhereTheClusterDidIsSentTheCutNotTheSnapshot) {
  std::ostringstream log0, log1, log2;
  std::vector<float> params0;
  absl::StatusOr<std::unique_ptr<FlatPeer>> p0 = FirstPeerThreeStepsIn(params0, log0);
  ASSERT_TRUE(p0.ok()) << p0.status() << "\n" << log0.str();
  const std::vector<std::string> seeds = {(*p0)->peers().address()};
  absl::StatusOr<std::unique_ptr<FlatPeer>> p1 =
      FlatPeer::Create(Options("p1", seeds), Initial(), log1);
  ASSERT_TRUE(p1.ok()) << p1.status() << "\n" << log1.str();
  EXPECT_NE(log1.str().find("joining by replay"), std::string::npos) << log1.str();
  EXPECT_NE(log1.str().find("arrived from the members' logs, 3 messages applied"),
            std::string::npos)
      << log1.str();
  EXPECT_EQ((*p1)->peers().node()->service().counters().snapshots_loaded(), 0u);
  EXPECT_EQ((*p0)->peers().node()->service().counters().snapshots_served(), 0u);
  // It starts at p0's cut: p0's three steps applied to the same start.
  std::vector<float> params1(kParams);
  ASSERT_TRUE((*p1)->ReadInto(params1).ok());
  EXPECT_EQ(params1, params0);

  // Another start: the snapshot (p0 steps meanwhile, so that it cuts).
  absl::StatusOr<std::unique_ptr<FlatPeer>> p2 =
      JoinWhileStepping(**p0, params0, Options("p2", seeds), OtherInitial(), log2);
  ASSERT_TRUE(p2.ok()) << p2.status() << "\n" << log2.str();
  EXPECT_EQ(log2.str().find("joining by replay"), std::string::npos) << log2.str();
  EXPECT_EQ((*p2)->peers().node()->service().counters().snapshots_loaded(), 1u);

  // Each trains a few steps of its own, then all agree.
  std::vector<std::vector<float>> params = {params0, params1, std::vector<float>(kParams)};
  ASSERT_TRUE((*p2)->ReadInto(params[2]).ok());
  std::vector<FlatPeer*> peers = {p0->get(), p1->get(), p2->get()};
  std::vector<absl::Status> results(3);
  std::vector<std::thread> loops;
  for (int p = 0; p < 3; ++p) {
    loops.emplace_back([&, p] {
      for (int s = 0; s < 20 && results[p].ok(); ++s) {
        OptimizerStep(params[p], p);
        results[p] = peers[p]->Step(params[p]);
      }
      if (results[p].ok()) results[p] = peers[p]->Finish(params[p]);
    });
  }
  for (std::thread& t : loops) t.join();
  for (int p = 0; p < 3; ++p) ASSERT_TRUE(results[p].ok()) << "p" << p << ": " << results[p];
  EXPECT_EQ(*peers[0]->WeightHash(), *peers[1]->WeightHash());
  EXPECT_EQ(*peers[0]->WeightHash(), *peers[2]->WeightHash());
  EXPECT_EQ(params[0], params[1]);
  EXPECT_EQ(params[0], params[2]);
}

// A parameter the optimizer made NaN or Inf is refused by name: nothing
// published, the residual and the parameters as they were.
TEST(FlatPeer, ANonFiniteParameterIsRefusedAndNothingIsPublished) {
  std::ostringstream log;
  absl::StatusOr<std::unique_ptr<FlatPeer>> p = FlatPeer::Create(Options("p0", {}), Initial(), log);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<float> params = Initial();
  OptimizerStep(params, 0);
  params[3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> given = params;
  const absl::Status s = (*p)->Step(params);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("parameter 3 is nan"), std::string::npos) << s;
  EXPECT_EQ((*p)->steps(), 0u);
  EXPECT_TRUE(std::isnan(params[3]));
  params[3] = given[3] = 0;
  EXPECT_EQ(std::vector<float>(params.begin() + 4, params.end()),
            std::vector<float>(given.begin() + 4, given.end()));
  // Another count: refused too.
  std::vector<float> short_params(10);
  EXPECT_EQ((*p)->Step(short_params).code(), absl::StatusCode::kInvalidArgument);
  // A good step then goes through as the first.
  ASSERT_TRUE((*p)->Step(params).ok());
  EXPECT_EQ((*p)->steps(), 1u);
}

// The threshold may change between any two steps (each message carries its
// step): a schedule that follows the learning rate, as reckon.torch's
// `peer.threshold = k * lr`. A threshold no step can carry is refused and
// changes nothing; two peers whose thresholds move every step end with the
// same replica.
TEST(FlatPeer, TheThresholdMayChangeBetweenStepsAndThePeersStayIdentical) {
  std::ostringstream log0, log1;
  absl::StatusOr<std::unique_ptr<FlatPeer>> p0 =
      FlatPeer::Create(Options("p0", {}), Initial(), log0);
  ASSERT_TRUE(p0.ok()) << p0.status();
  EXPECT_FLOAT_EQ((*p0)->threshold(), 0.001f);
  for (double bad : {0.0, -0.01, std::nan(""), 1e-12}) {
    const absl::Status s = (*p0)->SetThreshold(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_FLOAT_EQ((*p0)->threshold(), 0.001f) << bad;
  }
  // A threshold above every change sends nothing; a small one sends.
  std::vector<float> params0 = Initial();
  ASSERT_TRUE((*p0)->SetThreshold(10.0).ok());
  OptimizerStep(params0, 0);
  ASSERT_TRUE((*p0)->Step(params0).ok());
  EXPECT_EQ((*p0)->updates_sent(), 0u);
  EXPECT_EQ(params0, Initial());  // the change waits in the residual
  ASSERT_TRUE((*p0)->SetThreshold(0.0005).ok());
  EXPECT_FLOAT_EQ((*p0)->threshold(), 0.0005f);
  OptimizerStep(params0, 0);
  ASSERT_TRUE((*p0)->Step(params0).ok());
  EXPECT_GT((*p0)->updates_sent(), kParams / 2);
  // A second peer from the same start (it joins by replay, taking the
  // two steps above), both moving their thresholds every step.
  absl::StatusOr<std::unique_ptr<FlatPeer>> p1 =
      FlatPeer::Create(Options("p1", {(*p0)->peers().address()}), Initial(), log1);
  ASSERT_TRUE(p1.ok()) << p1.status() << "\n" << log1.str();
  std::vector<float> params1(kParams);
  ASSERT_TRUE((*p1)->ReadInto(params1).ok());
  EXPECT_EQ(params1, params0);
  constexpr int kSteps = 40;
  absl::Status result0;
  std::thread training0([&] {
    for (int s = 0; s < kSteps && result0.ok(); ++s) {
      result0 = (*p0)->SetThreshold(0.0005 * (1 + s % 4));
      OptimizerStep(params0, 0);
      if (result0.ok()) result0 = (*p0)->Step(params0);
    }
    if (result0.ok()) result0 = (*p0)->Finish(params0);
  });
  absl::Status result1;
  for (int s = 0; s < kSteps && result1.ok(); ++s) {
    result1 = (*p1)->SetThreshold(0.003 / (1 + s % 3));
    OptimizerStep(params1, 1);
    if (result1.ok()) result1 = (*p1)->Step(params1);
  }
  if (result1.ok()) result1 = (*p1)->Finish(params1);
  training0.join();
  ASSERT_TRUE(result0.ok()) << result0 << "\n" << log0.str();
  ASSERT_TRUE(result1.ok()) << result1 << "\n" << log1.str();
  EXPECT_EQ(*(*p0)->WeightHash(), *(*p1)->WeightHash());
  EXPECT_EQ(params0, params1);
  EXPECT_NE(params0, Initial());
}

// A peer on a GPU that is not there is refused, naming the device, before
// it joins anything: kUnavailable in a build with CUDA, kFailedPrecondition
// in one without.
TEST(FlatPeer, APeerOnAGpuThatIsNotThereIsRefusedSayingWhy) {
  FlatPeerOptions o = Options("p0", {});
  o.device = 999;
  std::ostringstream log;
  absl::StatusOr<std::unique_ptr<FlatPeer>> p = FlatPeer::Create(o, Initial(), log);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), RECKON_HAVE_CUDA ? absl::StatusCode::kUnavailable
                                                : absl::StatusCode::kFailedPrecondition)
      << p.status();
  EXPECT_NE(p.status().message().find("CUDA device"), std::string::npos) << p.status();
}

#if RECKON_HAVE_CUDA
// A framework's parameters in GPU memory, and the host copy its "optimizer"
// (OptimizerStep) works on.
struct GpuParams {
  GpuParams() { EXPECT_EQ(cudaMalloc(&device, kParams * sizeof(float)), cudaSuccess); }
  ~GpuParams() { cudaFree(device); }
  std::span<float> span() { return {device, kParams}; }
  void Upload() {
    ASSERT_EQ(cudaMemcpy(device, host.data(), kParams * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  void Download() {
    ASSERT_EQ(cudaMemcpy(host.data(), device, kParams * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  float* device = nullptr;
  std::vector<float> host = std::vector<float>(kParams);
};

// Peers whose parameters are on a GPU (cuda/cuda_flat_replica.h) in a cluster
// with one whose parameters are in host memory: one GPU peer joins by
// replay (the cluster's initial weights: the messages are applied on the
// device), one from a snapshot (other initial weights: loaded onto the
// device), and all three end with the same replica, bit for bit, in their
// parameters.
TEST(FlatPeer, PeersOnAGpuAndOnTheHostEndWithTheSameReplica) {
  SKIP_WITHOUT_GPU();
  std::ostringstream log0, log1, log2;
  std::vector<float> params0;
  absl::StatusOr<std::unique_ptr<FlatPeer>> p0 = FirstPeerThreeStepsIn(params0, log0);
  ASSERT_TRUE(p0.ok()) << p0.status() << "\n" << log0.str();
  const std::vector<std::string> seeds = {(*p0)->peers().address()};
  FlatPeerOptions on_gpu = Options("gpu-replay", seeds);
  on_gpu.device = 0;
  absl::StatusOr<std::unique_ptr<FlatPeer>> p1 = FlatPeer::Create(on_gpu, Initial(), log1);
  ASSERT_TRUE(p1.ok()) << p1.status() << "\n" << log1.str();
  EXPECT_NE(log1.str().find("joining by replay"), std::string::npos) << log1.str();
  // Another start: the snapshot (the host peer steps meanwhile, so that it
  // cuts).
  on_gpu.peers.node.node_id = "gpu-snapshot";
  absl::StatusOr<std::unique_ptr<FlatPeer>> p2 =
      JoinWhileStepping(**p0, params0, on_gpu, OtherInitial(), log2);
  ASSERT_TRUE(p2.ok()) << p2.status() << "\n" << log2.str();
  EXPECT_EQ((*p2)->peers().node()->service().counters().snapshots_loaded(), 1u) << log2.str();
  GpuParams params1, params2;
  ASSERT_TRUE((*p1)->ReadInto(params1.span()).ok());
  params1.Download();
  ASSERT_TRUE((*p2)->ReadInto(params2.span()).ok());
  params2.Download();
  EXPECT_NE(params2.host, OtherInitial());  // the host peer's snapshot

  std::vector<absl::Status> results(3);
  std::thread host_loop([&] {
    for (int s = 0; s < 30 && results[0].ok(); ++s) {
      OptimizerStep(params0, 0);
      results[0] = (*p0)->Step(params0);
    }
    if (results[0].ok()) results[0] = (*p0)->Finish(params0);
  });
  std::vector<std::thread> gpu_loops;
  for (int p : {1, 2}) {
    gpu_loops.emplace_back([&, p] {
      FlatPeer* peer = p == 1 ? p1->get() : p2->get();
      GpuParams& params = p == 1 ? params1 : params2;
      for (int s = 0; s < 30 && results[p].ok(); ++s) {
        OptimizerStep(params.host, p);
        params.Upload();
        results[p] = peer->Step(params.span());
        params.Download();
      }
      if (results[p].ok()) results[p] = peer->Finish(params.span());
      params.Download();
    });
  }
  host_loop.join();
  for (std::thread& t : gpu_loops) t.join();
  for (int p = 0; p < 3; ++p) ASSERT_TRUE(results[p].ok()) << "p" << p << ": " << results[p];
  EXPECT_EQ(*(*p1)->WeightHash(), *(*p0)->WeightHash());
  EXPECT_EQ(*(*p2)->WeightHash(), *(*p0)->WeightHash());
  EXPECT_EQ(params1.host, params0);
  EXPECT_EQ(params2.host, params0);
  EXPECT_GT((*p1)->updates_sent(), 0u);
  EXPECT_GT((*p2)->updates_sent(), 0u);
}
#endif  // RECKON_HAVE_CUDA

}  // namespace
}  // namespace reckon::python
