// The bridge between the trainer and the gossip node (worker/gossip_peers.h),
// in one process: a real node with its gRPC server on loopback, and members
// played by scripted peers (tests/scripted_peer.h).
#include "worker/gossip_peers.h"

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "cpu/cpu_backend.h"
#include "model/model.h"
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
TEST(GossipPeers, ARejoinWhoseSourceDoesNotAnswerIsTriedElsewhere) {
  model::BackendConfig config;
  config.shape = *model::ModelShape::Parse("8,4,2", "relu");
  config.threads = 1;
  PeerOptions o;
  o.node.node_id = "w0";
  o.node.incarnation = 1;
  o.node.fingerprint.set_model(config.shape.ToString());
  o.node.fingerprint.set_param_count(config.shape.param_count());
  o.node.fingerprint.set_fraction_bits(config.fraction_bits);
  o.node.fingerprint.set_codec(v1::CODEC_THRESHOLD_RICE);
  o.node.fingerprint.set_seed(1);
  o.node.fingerprint.set_protocol_version(1);
  o.listen = "127.0.0.1:0";
  o.check_interval = std::chrono::milliseconds(0);
  const std::vector<int64_t> initial =
      *model::InitialWeights(config.shape, config.fraction_bits, 1);
  std::ostringstream log;
  absl::StatusOr<std::unique_ptr<GossipPeers>> peers =
      GossipPeers::Create(o, initial, config.fraction_bits, log);
  ASSERT_TRUE(peers.ok()) << peers.status();
  absl::StatusOr<std::unique_ptr<model::Backend>> backend = cpu::MakeCpuBackend(config);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_TRUE((*backend)->LoadWeights(initial).ok());
  server::GossipNode* node = (*peers)->node();
  // Nothing listens on ports 1 and 2 of loopback: a fetch is refused at once.
  ScriptedPeer gone(node, "gone", 7, "127.0.0.1:1");
  ScriptedPeer other(node, "other", 8, "127.0.0.1:2");
  v1::GossipFrame resync;
  resync.mutable_resync()->mutable_origin()->set_node_id("gone");
  resync.mutable_resync()->mutable_origin()->set_incarnation(7);
  resync.mutable_resync()->set_first_retained_seq(5);
  gone.Send(resync);
  ASSERT_TRUE(Eventually([&] { return node->ResyncSource() == "127.0.0.1:1"; }));

  const absl::Status step = (*peers)->BeforeStep(**backend, 0);
  EXPECT_TRUE(step.ok()) << step;
  EXPECT_EQ(node->ResyncSource(), "127.0.0.1:2");
  EXPECT_NE(log.str().find("re-join from 127.0.0.1:1 failed"), std::string::npos) << log.str();
  // And the other way round: never stuck on one that does not answer.
  EXPECT_TRUE((*peers)->BeforeStep(**backend, 0).ok());
  EXPECT_EQ(node->ResyncSource(), "127.0.0.1:1");
}

// A seed that serves a snapshot of weights it made up, with their own
// checksum and an honest member's vector: everything the snapshot says of
// itself holds, so only another member's messages can tell.
class MadeUpSnapshotSource final : public server::NodeService {
 public:
  MadeUpSnapshotSource(server::VersionMap applied, std::vector<int64_t> weights)
      : NodeService(server::testing::Fingerprint(), "liar"),
        checksum_(server::testing::Fingerprint().seed()),
        applied_(std::move(applied)),
        weights_(std::move(weights)) {}
  bool started() const override { return true; }
  absl::Status CheckPeer(const v1::ClusterFingerprint&, const std::string&,
                         const std::string&) const override {
    return absl::OkStatus();
  }
  absl::Status CheckToken(const std::string&) const override { return absl::OkStatus(); }
  Snapshot TakeSnapshot(bool with_weights) override {
    Snapshot s{applied_, checksum_.Of(weights_), {}};
    if (with_weights) s.weights = weights_;
    return s;
  }
  bool CheckSnapshotServed(const Snapshot&, uint64_t) override { return true; }
  const codec::WeightChecksum& weight_checksum() const override { return checksum_; }
  std::optional<uint64_t> ChecksumAt(const server::VersionMap&) override { return std::nullopt; }
  server::VersionMap Applied() override { return applied_; }
  void NoteJoiner(const std::string&, uint64_t) override {}
  void FillStatus(v1::NodeStatus* out, bool) override { out->set_node_id("liar"); }
  void Count(int, uint64_t) override {}
  void Log(const std::string&) override {}
  void OnLinkUp(const std::shared_ptr<server::Link>&) override {}
  bool OnFrame(const std::shared_ptr<server::Link>&, v1::GossipFrame) override { return true; }
  void OnLinkClosed(const std::shared_ptr<server::Link>&, const std::string&) override {}

 private:
  const codec::WeightChecksum checksum_;
  const server::VersionMap applied_;
  const std::vector<int64_t> weights_;
};

// A worker's first join used to install its source's snapshot unwitnessed
// (it has no members yet): a seed that made its weights up was trained on.
// The other seeds that answered the probe witness the cut now; the liar is
// refused, and the worker joins from an honest seed.
TEST(GossipPeers, AFirstJoinIsWitnessedByTheOtherSeeds) {
  namespace t = server::testing;
  int port = 0;
  std::unique_ptr<server::GossipServer> honest_server =
      *server::GossipServer::Start("127.0.0.1:0", {}, &port);
  server::NodeOptions h = t::Options(0, 1);
  h.node_id = "honest";
  h.listen_address = absl::StrCat("127.0.0.1:", port);
  h.seeds.clear();
  std::unique_ptr<server::GossipNode> honest =
      *server::GossipNode::Create(h, t::InitialWeights(), t::kFractionBits);
  honest_server->SetNode(honest.get(), honest.get());
  honest->Start(honest_server->MakeDialer(honest.get()));
  std::mt19937_64 rng(5);
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    t::Message m = t::MakeMessage(h, seq, rng);
    ASSERT_TRUE(honest->Publish(m.update, m.decoded).ok());
  }
  const server::GossipNode::Snapshot truth = honest->TakeSnapshot(true);

  std::vector<int64_t> made_up = truth.weights;
  made_up[7] += int64_t{1} << 40;
  MadeUpSnapshotSource liar(truth.applied, made_up);
  int liar_port = 0;
  std::unique_ptr<server::GossipServer> liar_server =
      *server::GossipServer::Start("127.0.0.1:0", {}, &liar_port);
  liar_server->SetNode(&liar, &liar);

  PeerOptions o;
  o.node = t::Options(1, 2);
  o.node.node_id = "joiner";
  // The liar first: as advanced as the honest seed, it is the one chosen.
  o.node.seeds = {absl::StrCat("127.0.0.1:", liar_port), h.listen_address};
  o.listen = "127.0.0.1:0";
  o.check_interval = std::chrono::milliseconds(0);
  o.join_timeout = std::chrono::seconds(30);
  std::ostringstream log;
  absl::StatusOr<std::unique_ptr<GossipPeers>> joiner =
      GossipPeers::Create(o, t::InitialWeights(), t::kFractionBits, log);
  ASSERT_TRUE(joiner.ok()) << joiner.status() << "\n" << log.str();
  const server::GossipNode::Snapshot joined = (*joiner)->node()->TakeSnapshot(true);
  EXPECT_EQ(joined.weights, truth.weights) << log.str();
  EXPECT_EQ(joined.applied, truth.applied);
  EXPECT_NE(log.str().find(absl::StrCat("snapshot from 127.0.0.1:", liar_port, " NOT INSTALLED")),
            std::string::npos)
      << log.str();
  joiner->reset();
  liar_server->Shutdown(std::chrono::milliseconds(1000));
  honest->Stop(false, std::chrono::milliseconds(0));
  honest_server->Shutdown(std::chrono::milliseconds(1000));
}

}  // namespace
}  // namespace reckon::worker
