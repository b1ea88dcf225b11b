// The bridge between the trainer and the gossip node (worker/gossip_peers.h),
// in one process: a real node with its gRPC server on loopback, and members
// played by scripted peers (tests/scripted_peer.h).
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "cpu/cpu_backend.h"
#include "model/model.h"
#include "tests/scripted_peer.h"
#include "worker/gossip_peers.h"

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

}  // namespace
}  // namespace reckon::worker
