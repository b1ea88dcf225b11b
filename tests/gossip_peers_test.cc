// The bridge between the trainer and the gossip node (worker/gossip_peers.h),
// in one process: a real node with its gRPC server on loopback, and members
// played by scripted peers (tests/scripted_peer.h).
#include "worker/gossip_peers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <sstream>
#include <thread>

#include "cpu/cpu_backend.h"
#include "model/model.h"
#include "server/cluster_config.h"
#include "server/grpc_transport.h"
#include "tests/inproc_cluster.h"
#include "tests/scripted_peer.h"

namespace reckon::worker {
namespace {

using server::ScriptedPeer;

bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

// A re-join (the node was told it fell out of a peer's log) whose source
// does not answer is not fatal: the step goes on, and the next attempt goes
// to another live member. (Seen with 64 members on two cores: the source was
// too busy to answer, and the worker exited 1.)
// A worker alone on loopback with a CPU backend of the 8,4,2 model (its
// checks off: a test steps it).
struct LoneWorker {
  explicit LoneWorker(std::chrono::milliseconds training_cut_wait = std::chrono::seconds(20)) {
    config.shape = *model::ModelShape::Parse("8,4,2", "relu");
    config.threads = 1;
    o.node.node_id = "w0";
    o.node.incarnation = 1;
    server::ClusterSpec spec;
    spec.model = config.shape.ToString();
    spec.param_count = config.shape.param_count();
    spec.fraction_bits = config.fraction_bits;
    spec.seed = 1;
    o.node.fingerprint = server::MakeFingerprint(spec);
    o.listen = "127.0.0.1:0";
    o.check_interval = std::chrono::milliseconds(0);
    o.transport.training_cut_wait = training_cut_wait;
    initial = *model::InitialWeights(config.shape, config.fraction_bits, 1);
    absl::StatusOr<std::unique_ptr<GossipPeers>> made =
        GossipPeers::Create(o, initial, config.fraction_bits, log);
    EXPECT_TRUE(made.ok()) << made.status();
    peers = *std::move(made);
    backend = *cpu::MakeCpuBackend(config);
    EXPECT_TRUE(backend->LoadWeights(initial).ok());
  }
  // What a joiner asks of it: the whole snapshot.
  absl::StatusOr<server::FetchedSnapshot> Fetch() const {
    v1::SnapshotRequest request;
    *request.mutable_fingerprint() = o.node.fingerprint;
    request.mutable_requester()->set_node_id("joiner");
    request.mutable_requester()->set_incarnation(5);
    return server::FetchSnapshot(peers->address(), request, config.shape.param_count(),
                                 std::chrono::seconds(30));
  }

  model::BackendConfig config;
  PeerOptions o;
  std::vector<int64_t> initial;
  std::ostringstream log;
  std::unique_ptr<GossipPeers> peers;
  std::unique_ptr<model::Backend> backend;
};

// A worker's node keeps no mirror: a snapshot it serves over gRPC is its
// training replica, cut at the training thread's next step boundary, and
// checked against the messages' checksum before it is sent (a replica that
// fails is never handed on). Without a step boundary within the cut wait
// the call ends UNAVAILABLE, saying why.
TEST(GossipPeers, ASnapshotIsCutFromTheTrainingReplicaAtAStepBoundary) {
  LoneWorker w(std::chrono::milliseconds(600));
  ASSERT_NE(w.peers, nullptr);
  std::atomic<bool> stepping{true};
  std::thread training([&] {
    while (stepping.load()) {
      EXPECT_TRUE(w.peers->BeforeStep(*w.backend, 0).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  absl::StatusOr<server::FetchedSnapshot> got = w.Fetch();
  ASSERT_TRUE(got.ok()) << got.status() << "\n" << w.log.str();
  EXPECT_EQ(got->weights, *w.backend->ReadWeights());
  EXPECT_EQ(got->header.checksum(), w.peers->node()->service().weight_checksum().Of(w.initial));
  stepping = false;
  training.join();

  // No step boundary: refused once the cut wait is over.
  const auto start = std::chrono::steady_clock::now();
  got = w.Fetch();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_NE(got.status().message().find("did not cut its replica within 600 ms"), std::string::npos)
      << got.status();
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));

  // A training replica that is not what its messages say is not served.
  std::vector<int64_t> corrupt = w.initial;
  corrupt[3] += 1;
  ASSERT_TRUE(w.backend->LoadWeights(corrupt).ok());
  stepping = true;
  std::thread corrupted([&] {
    while (stepping.load()) {
      (void)w.peers->BeforeStep(*w.backend, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  got = w.Fetch();
  stepping = false;
  corrupted.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_EQ(w.peers->node()->service().counters().replica_check_failures(), 1u);
}

// The node keeps no mirror to see a weight wrap past the int64 range: the
// training replica's are counted into its weights_wrapped (and said once).
TEST(GossipPeers, WeightsThatWrapInTheTrainingReplicaAreCountedByTheNode) {
  LoneWorker w;
  ASSERT_NE(w.peers, nullptr);
  std::vector<int64_t> near_the_top = w.initial;
  near_the_top[0] = std::numeric_limits<int64_t>::max();
  ASSERT_TRUE(w.backend->LoadWeights(near_the_top).ok());
  ASSERT_TRUE(w.backend->ApplyUpdates(int64_t{1} << 24, std::vector<uint32_t>{0}).ok());
  EXPECT_EQ(w.backend->WeightsWrapped(), 1u);
  ASSERT_TRUE(w.peers->BeforeStep(*w.backend, 0).ok());
  EXPECT_EQ(w.peers->node()->service().counters().weights_wrapped(), 1u);
  ASSERT_TRUE(w.peers->BeforeStep(*w.backend, 1).ok());  // counted once
  EXPECT_EQ(w.peers->node()->service().counters().weights_wrapped(), 1u);
  EXPECT_NE(w.log.str().find("1 weight additions passed the int64 range"), std::string::npos)
      << w.log.str();
}

TEST(GossipPeers, ARejoinWhoseSourceDoesNotAnswerIsTriedElsewhere) {
  LoneWorker w;
  ASSERT_NE(w.peers, nullptr);
  server::GossipNode* node = w.peers->node();
  // Nothing listens on ports 1 and 2 of loopback: a fetch is refused at once.
  ScriptedPeer gone(node, "gone", 7, "127.0.0.1:1");
  ScriptedPeer other(node, "other", 8, "127.0.0.1:2");
  // The other has gone's messages too (a re-join goes only to a member
  // whose vector has what we lack).
  v1::GossipFrame has_them;
  server::ToProto({{server::OriginKey{"gone", 7}, 6}},
                  has_them.mutable_heartbeat()->mutable_applied());
  other.Send(has_them);
  gone.Send(server::RejoinRequiredFrame("gone", 7, 5));
  // Others before the sender.
  ASSERT_TRUE(Eventually([&] { return node->training().RejoinSource() == "127.0.0.1:2"; }));

  const absl::Status step = w.peers->BeforeStep(*w.backend, 0);
  EXPECT_TRUE(step.ok()) << step;
  EXPECT_EQ(node->training().RejoinSource(), "127.0.0.1:1");
  EXPECT_NE(w.log.str().find("re-join from 127.0.0.1:2 failed"), std::string::npos)
      << w.log.str();
  // And the other way round: never stuck on one that does not answer.
  EXPECT_TRUE(w.peers->BeforeStep(*w.backend, 0).ok());
  EXPECT_EQ(node->training().RejoinSource(), "127.0.0.1:2");
}

// A seed that serves a snapshot of weights it made up, with their own
// checksum and an honest member's vector: everything the snapshot says of
// itself holds, so only another member's messages can tell.
class MadeUpSnapshotSource final : public server::NodeService {
 public:
  // `witness_says`: its answer when asked as a witness (nullopt: "not
  // applied that far").
  MadeUpSnapshotSource(server::VersionMap applied, std::vector<int64_t> weights,
                       std::optional<uint64_t> witness_says = std::nullopt,
                       const std::string& id = "liar")
      : NodeService(server::testing::Fingerprint(), id, /*max_origins=*/4096),
        checksum_(server::testing::Fingerprint().seed()),
        applied_(std::move(applied)),
        weights_(std::move(weights)),
        witness_says_(witness_says) {}
  bool started() const override { return true; }
  absl::Status CheckPeer(const v1::ClusterFingerprint&, const std::string&,
                         const std::string&) const override {
    return absl::OkStatus();
  }
  absl::Status CheckToken(const std::string&) const override { return absl::OkStatus(); }
  Snapshot TakeSnapshot(bool with_weights, server::Clock::time_point) override {
    Snapshot s{applied_, checksum_.Of(weights_), {}};
    if (with_weights) s.weights = weights_;
    return s;
  }
  bool CheckSnapshotServed(const Snapshot&, uint64_t) override { return true; }
  const codec::WeightChecksum& weight_checksum() const override { return checksum_; }
  std::optional<uint64_t> ChecksumAt(const server::VersionMap& at) override {
    if (at != applied_) return std::nullopt;
    return witness_says_;
  }
  server::VersionMap Applied() override { return applied_; }
  Replay ReplayOf(const server::VersionMap&, uint64_t) override { return claims_replay; }
  v1::InputStandardization InputStandardization() override { return {}; }
  void NoteJoiner(const std::string&, uint64_t) override {}
  void FillStatus(v1::NodeStatus* out, bool) override { out->set_node_id("liar"); }
  void Count(int, uint64_t) override {}
  void Log(const std::string&) override {}
  void OnLinkUp(const std::shared_ptr<server::Link>&) override {}
  bool OnFrame(const std::shared_ptr<server::Link>&, v1::GossipFrame) override { return true; }
  void OnLinkClosed(const std::shared_ptr<server::Link>&, const std::string&) override {}

  // What its probe answers say of a join by replay (default: none).
  Replay claims_replay;

 private:
  const codec::WeightChecksum checksum_;
  const server::VersionMap applied_;
  const std::vector<int64_t> weights_;
  const std::optional<uint64_t> witness_says_;
};

// A real node on loopback that published three messages: an honest seed.
struct HonestSeed {
  HonestSeed() {
    namespace t = server::testing;
    int port = 0;
    server = *server::GossipServer::Start("127.0.0.1:0", {}, &port);
    server::NodeOptions h = t::Options(0, 1);
    h.node_id = "honest";
    h.listen_address = address = absl::StrCat("127.0.0.1:", port);
    h.seeds.clear();
    node = *server::GossipNode::Create(h, t::InitialWeights(), t::kFractionBits);
    server->SetNode(&node->service(), &node->service());
    node->Start(server->MakeDialer(&node->service()));
    std::mt19937_64 rng(5);
    for (uint64_t seq = 1; seq <= 3; ++seq) {
      t::Message m = t::MakeMessage(h, seq, rng);
      EXPECT_TRUE(node->training().Publish(m.update, m.decoded).ok());
    }
    truth = node->service().TakeSnapshot(true);
  }
  ~HonestSeed() {
    node->Stop(false, std::chrono::milliseconds(0));
    server->Shutdown(std::chrono::milliseconds(1000));
  }
  std::unique_ptr<server::GossipServer> server;
  std::unique_ptr<server::GossipNode> node;
  std::string address;
  server::NodeService::Snapshot truth;
  // What a liar serves as this seed's cut: one weight moved far.
  std::vector<int64_t> MadeUpWeights() const {
    std::vector<int64_t> w = truth.weights;
    w[7] += int64_t{1} << 40;
    return w;
  }
};

// Serves `node` on loopback for as long as it lives.
struct Served {
  explicit Served(server::NodeService* node) {
    int port = 0;
    server = *server::GossipServer::Start("127.0.0.1:0", {}, &port);
    server->SetNode(node, node);
    address = absl::StrCat("127.0.0.1:", port);
  }
  ~Served() { server->Shutdown(std::chrono::milliseconds(1000)); }
  std::unique_ptr<server::GossipServer> server;
  std::string address;
};

// A first join's log says the snapshot of `source` was refused.
void ExpectRefused(const std::string& log, const std::string& source) {
  EXPECT_NE(log.find(absl::StrCat("snapshot from ", source, " NOT INSTALLED")), std::string::npos)
      << log;
}

PeerOptions JoinerOptions(std::vector<std::string> seeds) {
  PeerOptions o;
  o.node = server::testing::Options(1, 2);
  o.node.node_id = "joiner";
  o.node.seeds = std::move(seeds);
  o.listen = "127.0.0.1:0";
  o.check_interval = std::chrono::milliseconds(0);
  o.join_timeout = std::chrono::seconds(30);
  return o;
}

// Initial weights that are not the seeds': the joiner loads a snapshot (a
// join by replay needs the cluster's start).
std::vector<int64_t> OtherInitialWeights() {
  std::vector<int64_t> w = server::testing::InitialWeights();
  for (int64_t& q : w) q += 12345;
  return w;
}

// A worker's first join used to install its source's snapshot unwitnessed
// (it has no members yet): a seed that made its weights up was trained on.
// The other seeds that answered the probe witness the cut now; the liar is
// refused, and the worker joins from an honest seed, which the third seed
// confirms.
TEST(GossipPeers, AFirstJoinIsWitnessedByTheOtherSeeds) {
  namespace t = server::testing;
  HonestSeed honest;
  const std::vector<int64_t> made_up = honest.MadeUpWeights();
  MadeUpSnapshotSource liar(honest.truth.applied, made_up);
  Served liar_served(&liar);
  MadeUpSnapshotSource other(honest.truth.applied, honest.truth.weights, honest.truth.checksum,
                             "other");
  Served other_served(&other);
  // The liar first: as advanced as the honest seeds, it is the one chosen.
  std::ostringstream log;
  absl::StatusOr<std::unique_ptr<GossipPeers>> joiner = GossipPeers::Create(
      JoinerOptions({liar_served.address, honest.address, other_served.address}),
      OtherInitialWeights(), t::kFractionBits, log);
  ASSERT_TRUE(joiner.ok()) << joiner.status() << "\n" << log.str();
  // The worker's node keeps no mirror: what it installed waits for the
  // training thread.
  server::Received joined = (*joiner)->node()->training().TakeReceived();
  ASSERT_TRUE(joined.replace_weights.has_value()) << log.str();
  EXPECT_EQ(*joined.replace_weights, honest.truth.weights) << log.str();
  EXPECT_TRUE(joined.updates.empty());
  EXPECT_EQ((*joiner)->node()->service().Applied(), honest.truth.applied);
  ExpectRefused(log.str(), liar_served.address);
  EXPECT_NE(log.str().find("confirmed by another member"), std::string::npos) << log.str();
}

// The same liar before a joiner that started where the honest seed did:
// its snapshot is refused as above, and then the honest seed's log sends
// the cut (a join by replay): nothing of any source's weights is installed.
TEST(GossipPeers, AfterALiarsSnapshotTheJoinerIsSentTheCutByTheHonestLog) {
  namespace t = server::testing;
  HonestSeed honest;
  const std::vector<int64_t> made_up = honest.MadeUpWeights();
  MadeUpSnapshotSource liar(honest.truth.applied, made_up);
  Served liar_served(&liar);
  std::ostringstream log;
  absl::StatusOr<std::unique_ptr<GossipPeers>> joiner =
      GossipPeers::Create(JoinerOptions({liar_served.address, honest.address}), t::InitialWeights(),
                          t::kFractionBits, log);
  ASSERT_TRUE(joiner.ok()) << joiner.status() << "\n" << log.str();
  server::Received joined = (*joiner)->node()->training().TakeReceived();
  EXPECT_FALSE(joined.replace_weights.has_value()) << log.str();
  EXPECT_EQ(joined.updates.size(), 3u) << log.str();
  EXPECT_EQ((*joiner)->node()->service().Applied(), honest.truth.applied);
  ExpectRefused(log.str(), liar_served.address);
  EXPECT_NE(log.str().find("joining by replay"), std::string::npos) << log.str();
}

// A source that says its log holds the cut but whose messages never come
// (here: it sends none at all): the joiner waits kReplayWait without one
// arriving, then loads the snapshot after all (the only seed: unwitnessed).
TEST(GossipPeers, AJoinByReplayWhoseMessagesDoNotComeLoadsTheSnapshot) {
  namespace t = server::testing;
  HonestSeed honest;
  MadeUpSnapshotSource mute(honest.truth.applied, honest.truth.weights);
  mute.claims_replay.initial_sha256 = codec::WeightHashOf(t::InitialWeights());
  mute.claims_replay.bytes = 300;
  Served mute_served(&mute);
  std::ostringstream log;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<GossipPeers>> joiner = GossipPeers::Create(
      JoinerOptions({mute_served.address}), t::InitialWeights(), t::kFractionBits, log);
  ASSERT_TRUE(joiner.ok()) << joiner.status() << "\n" << log.str();
  EXPECT_GE(std::chrono::steady_clock::now() - start, GossipPeers::kReplayWait);
  EXPECT_NE(log.str().find("joining by replay"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("0 of the 3 messages of the cut of " + mute_served.address +
                           " arrived (then none for 10 s); loading its snapshot instead"),
            std::string::npos)
      << log.str();
  server::Received joined = (*joiner)->node()->training().TakeReceived();
  ASSERT_TRUE(joined.replace_weights.has_value()) << log.str();
  EXPECT_EQ(*joined.replace_weights, honest.truth.weights);
  EXPECT_EQ((*joiner)->node()->service().Applied(), honest.truth.applied);
  EXPECT_EQ((*joiner)->node()->service().counters().joins_by_replay(), 0u);
}

// Once a witness contradicted a snapshot, one of the two lied and the
// joiner cannot tell which: a seed that lies as a witness must not get the
// honest source refused and then serve its own snapshot unwitnessed. With
// no third seed to confirm one, nothing is installed, and the join ends at
// --join-timeout-s naming the contradiction (denial of service, not a
// replica made up).
TEST(GossipPeers, AfterAContradictionOnlyAWitnessedSnapshotIsInstalled) {
  namespace t = server::testing;
  HonestSeed honest;
  const std::vector<int64_t> made_up = honest.MadeUpWeights();
  const uint64_t made_up_checksum = codec::WeightChecksum(t::Fingerprint().seed()).Of(made_up);
  MadeUpSnapshotSource liar(honest.truth.applied, made_up, made_up_checksum);
  Served liar_served(&liar);
  PeerOptions o = JoinerOptions({honest.address, liar_served.address});
  o.join_timeout = std::chrono::seconds(2);
  std::ostringstream log;
  absl::StatusOr<std::unique_ptr<GossipPeers>> joiner =
      GossipPeers::Create(o, OtherInitialWeights(), t::kFractionBits, log);
  ASSERT_FALSE(joiner.ok()) << "installed a snapshot after a contradiction:\n" << log.str();
  EXPECT_EQ(joiner.status().code(), absl::StatusCode::kUnavailable) << joiner.status();
  EXPECT_NE(joiner.status().message().find("contradict"), std::string::npos) << joiner.status();
  EXPECT_EQ(log.str().find(absl::StrCat("snapshot from liar (", liar_served.address)),
            std::string::npos)
      << "the liar's snapshot was fetched:\n"
      << log.str();
}

}  // namespace
}  // namespace reckon::worker
