// The gossip node with signed updates (NodeOptions::signatures): where the
// check runs and what a certificate arriving beside its updates does. Over
// in-process links (tests/node/node_test_util.h).
#include <gtest/gtest.h>

#include <future>

#include "absl/synchronization/notification.h"
#include "tests/node/node_test_util.h"

namespace reckon::server {
namespace {

using namespace ::reckon::server::testing;  // NOLINT: the fixture
using std::chrono::milliseconds;
using std::chrono::seconds;

// Delegates to `inner` (or accepts everything without it), but the first
// Verify waits until Release(): the node's receive path is held inside the
// signature check.
class HeldSignatures final : public UpdateSignatures {
 public:
  explicit HeldSignatures(std::shared_ptr<UpdateSignatures> inner = nullptr)
      : inner_(std::move(inner)) {}
  void Sign(v1::Update* update) const override {
    if (inner_) inner_->Sign(update);
  }
  absl::Status Verify(const v1::Update& update) const override {
    if (!entered_.HasBeenNotified()) {
      entered_.Notify();
      released_.WaitForNotification();
    }
    return inner_ ? inner_->Verify(update) : absl::OkStatus();
  }
  absl::StatusOr<Learned> Learn(const std::string& pem) override {
    if (inner_) return inner_->Learn(pem);
    return Learned{"anyone", false};
  }
  std::vector<std::string> Certificates() const override {
    return inner_ ? inner_->Certificates() : std::vector<std::string>{};
  }
  bool WaitEntered() const { return entered_.WaitForNotificationWithTimeout(absl::Seconds(10)); }
  void Release() { released_.Notify(); }

 private:
  const std::shared_ptr<UpdateSignatures> inner_;
  mutable absl::Notification entered_, released_;
};

// An Ed25519 check costs tens of microseconds, a batch of them
// milliseconds: the node verifies off its lock (on the validation threads),
// so while a check runs, status, snapshots and the training thread go on.
TEST(GossipNode, ASignatureCheckHoldsNotTheNodesLock) {
  auto held = std::make_shared<HeldSignatures>();
  Nodes c(1, milliseconds(0), [&](int, NodeOptions& o) { o.signatures = held; });
  c.Start();
  GossipNode* node = c.node(0);
  ScriptedPeer member(node, "m", 3, "inproc:m");
  std::mt19937_64 rng(5);
  const Message first = MakeMessage(OriginOf("m", 3), 1, rng);
  member.SendUpdate(first.update);
  ASSERT_TRUE(held->WaitEntered());
  // The check is running: what takes the node's lock still answers.
  auto status = std::async(std::launch::async, [&] {
    v1::NodeStatus s;
    node->service().FillStatus(&s, /*with_weight_hash=*/false);
    return s.counters().updates_applied();
  });
  const bool answered = status.wait_for(seconds(10)) == std::future_status::ready;
  held->Release();
  ASSERT_TRUE(answered) << "status waited for a signature check";
  EXPECT_EQ(status.get(), 0u);
  EXPECT_TRUE(Eventually([&] { return SeqOf(node->service().Applied(), OriginKey{"m", 3}) == 1; }));
}

// The checks of a batch run before any of its frames is handled: an Update
// whose origin's certificate comes in the same batch (relayed just before
// it) is unknown to that check, and verified again under the lock once the
// certificate is learned. One of an origin still unknown then is refused.
TEST(GossipNode, AnUpdateWhoseCertificateCameInTheSameBatchIsVerified) {
  const KeyAndCertificate ca = *MakeCertificateAuthority("test CA", 1);
  auto tls_of = [&](const std::string& id) {
    const KeyAndCertificate cert = *IssueCertificate(ca, id, {}, 1);
    return *CheckTls({ca.cert_pem, cert.cert_pem, cert.key_pem, ""}, "test");
  };
  const TlsConfig n0 = tls_of("n0"), w2 = tls_of("w2");
  auto held = std::make_shared<HeldSignatures>(*MakeUpdateSignatures(n0));
  Nodes c(1, milliseconds(0), [&](int, NodeOptions& o) { o.signatures = held; });
  c.Start();
  GossipNode* node = c.node(0);
  ScriptedPeer member(node, "w1", 3, "inproc:w1");
  std::unique_ptr<UpdateSigner> w2_key = *UpdateSigner::Create(w2.key_pem);
  std::mt19937_64 rng(5);
  Message m1 = MakeMessage(OriginOf("w2", 4), 1, rng);
  w2_key->Sign(&m1.update);
  // Before w2's certificate: refused. Its check holds the node thread
  // while the next frames queue into one batch.
  member.SendUpdate(m1.update);
  ASSERT_TRUE(held->WaitEntered());
  v1::GossipFrame certificates;
  certificates.mutable_certificates()->add_pem(w2.cert_pem);
  member.Send(certificates);
  member.SendUpdate(m1.update);
  held->Release();
  ASSERT_TRUE(Eventually([&] {
    return SeqOf(node->service().Applied(), OriginKey{"w2", 4}) == 1;
  }));
  EXPECT_EQ(node->service().counters().signature_errors(), 1u) << "the one before the certificate";
  // Altered after signing: refused, whenever its certificate came.
  Message m2 = MakeMessage(OriginOf("w2", 4), 2, rng);
  w2_key->Sign(&m2.update);
  m2.update.set_step_quanta(m2.update.step_quanta() + 1);
  member.SendUpdate(m2.update);
  EXPECT_TRUE(Eventually([&] { return node->service().counters().signature_errors() == 2; }));
  EXPECT_EQ(SeqOf(node->service().Applied(), OriginKey{"w2", 4}), 1u);
}

}  // namespace
}  // namespace reckon::server
