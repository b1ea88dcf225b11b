// Membership: the gossip node's membership part, tested without sockets or
// a node (server/node_membership.h): the dials it makes and gives up on,
// a refusal that stops the node only when no seed may take it, the failure
// detector's verdicts, and what the relay rules ask of it.
#include "server/node_membership.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/server/parts_test_util.h"

namespace reckon::server {
namespace {

using Counters = v1::NodeCounters;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A link we dialed, remembering whether it was given up on.
class DialedLink final : public Link {
 public:
  explicit DialedLink(std::string address) : address_(std::move(address)) {}
  bool Send(std::shared_ptr<const v1::GossipFrame>, size_t) override { return true; }
  size_t QueuedBytes() const override { return 0; }
  void Close() override {}
  void Abort() override { aborted = true; }
  bool dialed() const override { return true; }
  std::string Describe() const override { return "dialed " + address_; }
  bool aborted = false;

 private:
  std::string address_;
};

class NodeMembership : public ::testing::Test {
 protected:
  NodeMembership() {
    options_.node_id = "me";
    options_.incarnation = 7;
    options_.listen_address = "me:1";
    options_.seeds = {"s1:1", "s2:1", "me:1"};  // our own address among them
    options_.failure_timeout = seconds(1);
  }
  // Made after a test changed options_.
  Membership& Make() {
    membership_ = std::make_unique<Membership>(
        options_, OriginKey{"me", 7}, counters_,
        [this](const std::string& line) { log_.push_back(line); }, t0_);
    membership_->Start(
        [this](const std::string& address) {
          auto link = std::make_shared<DialedLink>(address);
          dialed_.push_back(link);
          return link;
        },
        t0_);
    return *membership_;
  }
  std::string Log() const {
    std::string all;
    for (const std::string& line : log_) all += line + "\n";
    return all;
  }
  // `hello` admitted on `link`, its stream attached as the node does.
  Member& Connect(Membership& m, const std::shared_ptr<Link>& link, const v1::Hello& hello,
                  Clock::time_point now) {
    m.AwaitHello(link, now);
    Member& member = m.Admit(link, hello, now);
    member.links.Attach(link, 0, now);
    m.Connected(member, now);
    member.last_heard = now;
    return member;
  }

  NodeOptions options_;
  NodeCounterSet counters_;
  std::vector<std::string> log_;
  std::vector<std::shared_ptr<DialedLink>> dialed_;
  const Clock::time_point t0_ = Clock::time_point{} + seconds(100);
  std::unique_ptr<Membership> membership_;
};

// The seeds are dialed, never our own address; the links come back for the
// node's Hello and wait for the peer's; a dial without a handshake in two
// failure timeouts is given up (aborted, logged) and dialed again later.
TEST_F(NodeMembership, DialsTheSeedsButItselfAndGivesUpADialWithoutAHandshake) {
  Membership& m = Make();
  const std::vector<std::shared_ptr<Link>> first = m.DialDue(t0_);
  ASSERT_EQ(first.size(), 2u) << "s1 and s2, not me:1";
  for (const std::shared_ptr<Link>& link : first) EXPECT_TRUE(m.table().AwaitsHello(link));
  EXPECT_TRUE(m.DialDue(t0_ + milliseconds(500)).empty()) << "one dial in flight per address";
  EXPECT_TRUE(m.SeedsUnreached());
  m.DialDue(t0_ + seconds(2) + milliseconds(1));
  EXPECT_TRUE(dialed_[0]->aborted);
  EXPECT_TRUE(dialed_[1]->aborted);
  EXPECT_FALSE(m.table().AwaitsHello(first[0]));
  EXPECT_NE(Log().find("dial to s1:1 got no handshake in 2.0 s: abandoned"), std::string::npos)
      << Log();
  EXPECT_EQ(m.DialDue(t0_ + seconds(10)).size(), 2u) << "dialed again after the backoff";
}

// A refusal changes only what the refuser owns: its address is not dialed
// again. The node stops only when it cannot be a member at all: every
// seed refused it before any handshake completed.
TEST_F(NodeMembership, EverySeedRefusingBeforeAHandshakeStopsTheNodeAndOneLeftDoesNot) {
  Membership& m = Make();
  const std::vector<std::shared_ptr<Link>> links = m.DialDue(t0_);
  ASSERT_EQ(links.size(), 2u);
  EXPECT_TRUE(m.RefusedByDialed(links[0], "refused by s1").ok()) << "s2 may take us";
  const absl::Status last = m.RefusedByDialed(links[1], "refused by s2: another cluster");
  EXPECT_EQ(last.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(last.message(), "refused by s2: another cluster");
  EXPECT_EQ(counters_.Get(Counters::kDialsRefusedFieldNumber), 2u);
  EXPECT_TRUE(m.DialDue(t0_ + seconds(60)).empty()) << "refusers are not dialed again";
}

TEST_F(NodeMembership, ARefusalAfterAHandshakeNeverStopsTheNode) {
  Membership& m = Make();
  const std::vector<std::shared_ptr<Link>> links = m.DialDue(t0_);
  ASSERT_EQ(links.size(), 2u);
  Connect(m, links[0], HelloFrom("s1", 3, "s1:1"), t0_);
  EXPECT_FALSE(m.SeedsUnreached());
  EXPECT_TRUE(m.RefusedByDialed(links[1], "refused by s2").ok());
}

// The failure detector: a member silent past the failure timeout is dead,
// its links dropped, counted once; heard again, it is alive again. An
// origin not reached is presumed alive for a failure timeout from the
// start, a dead member's never.
TEST_F(NodeMembership, ASilentMemberIsDeadUntilHeardAgain) {
  Membership& m = Make();
  auto stream = std::make_shared<NowhereLink>();
  Member& b = Connect(m, stream, HelloFrom("b", 5, "b:1"), t0_);
  EXPECT_TRUE(m.OriginAlive({"b", 5}));
  EXPECT_FALSE(m.OriginAlive({"b", 4})) << "another incarnation";
  m.DetectFailures(t0_ + milliseconds(900));
  EXPECT_EQ(b.state(), MemberState::kAlive);
  m.DetectFailures(t0_ + milliseconds(1100));
  EXPECT_EQ(b.state(), MemberState::kDead);
  EXPECT_FALSE(b.links.connected());
  EXPECT_EQ(counters_.Get(Counters::kMembersFailedFieldNumber), 1u);
  m.DetectFailures(t0_ + seconds(5));
  EXPECT_EQ(counters_.Get(Counters::kMembersFailedFieldNumber), 1u) << "dead once";
  EXPECT_FALSE(m.OriginMayBeAlive({"b", 5}, t0_ + milliseconds(1100)));
  EXPECT_TRUE(m.OriginMayBeAlive({"c", 1}, t0_ + milliseconds(900))) << "not reached yet";
  EXPECT_FALSE(m.OriginMayBeAlive({"c", 1}, t0_ + milliseconds(1100)));
  EXPECT_TRUE(m.HeardAgain(b, t0_ + seconds(6)));
  EXPECT_FALSE(m.HeardAgain(b, t0_ + seconds(6))) << "alive already";
  EXPECT_TRUE(m.OriginAlive({"b", 5}));
}

// A seed that turns out to be a second address of a member (its IP, the
// member announcing its name): not dialed while the member's stream is up,
// whether its own handshake said so (s1) or the member's refusal of it,
// naming itself, while its stream came the other way (s2); dialed again
// once the member is dead, as a seed must be (a restart answers there). A
// refusal naming a member we have no stream with, or another incarnation,
// changes nothing.
TEST_F(NodeMembership, ASeedThatReachedAMemberIsNotDialedWhileItsStreamIsUp) {
  Membership& m = Make();
  auto dialed_at = [](const std::vector<std::shared_ptr<Link>>& links) {
    std::set<std::string> out;
    for (const auto& link : links) out.insert(link->Describe());
    return out;
  };
  const std::vector<std::shared_ptr<Link>> first = m.DialDue(t0_);
  ASSERT_EQ(dialed_at(first), (std::set<std::string>{"dialed s1:1", "dialed s2:1"}));
  Member& s1 = Connect(m, first[0], HelloFrom("s1", 3, "s1.example:1"), t0_);
  Member& s2 = Connect(m, std::make_shared<NowhereLink>(), HelloFrom("s2", 4, "s2.example:1"), t0_);
  m.RefusedForNow(first[1], {"s2", 4});
  m.LinkClosed(first[1]);
  Clock::time_point t = t0_ + milliseconds(500);
  s1.last_heard = s2.last_heard = t;
  std::set<std::string> again = dialed_at(m.DialDue(t));
  EXPECT_EQ(again.count("dialed s1:1") + again.count("dialed s2:1"), 0u);
  EXPECT_EQ(again.size(), 0u) << "their advertised addresses are connected too";
  // s2's stream gone (dead): its seed address is dialed again.
  m.DetectFailures(t + milliseconds(1100));
  EXPECT_EQ(s1.state(), MemberState::kDead);
  EXPECT_EQ(s2.state(), MemberState::kDead);
  again = dialed_at(m.DialDue(t + seconds(5)));
  EXPECT_EQ(again.count("dialed s1:1"), 1u);
  EXPECT_EQ(again.count("dialed s2:1"), 1u);
}

TEST_F(NodeMembership, ARefusalNamingNoMemberWeHearDoesNotStopTheDials) {
  Membership& m = Make();
  const std::vector<std::shared_ptr<Link>> first = m.DialDue(t0_);
  ASSERT_EQ(first.size(), 2u);
  Connect(m, std::make_shared<NowhereLink>(), HelloFrom("s2", 4, "s2.example:1"), t0_);
  m.RefusedForNow(first[0], {"nobody", 1});
  m.RefusedForNow(first[1], {"s2", 5});  // another incarnation than the one we hear
  m.LinkClosed(first[0]);
  m.LinkClosed(first[1]);
  EXPECT_EQ(m.DialDue(t0_ + milliseconds(500)).size(), 2u) << "s1:1 and s2:1 again";
}

// A joiner is recorded once and logged once; an id a Hello could not carry,
// or our own, is not.
TEST_F(NodeMembership, AJoinerIsNotedOnceAndOnlyUnderAValidId) {
  Membership& m = Make();
  EXPECT_TRUE(m.NoteJoiner("w9", 2, t0_));
  EXPECT_TRUE(m.NoteJoiner("w9", 2, t0_ + milliseconds(10)));
  EXPECT_FALSE(m.NoteJoiner("me", 7, t0_));
  EXPECT_FALSE(m.NoteJoiner("bad id\n", 1, t0_));
  EXPECT_EQ(m.JoinersStillComing(t0_ + milliseconds(20)), std::vector<std::string>{"w9"});
  EXPECT_EQ(Log(), "w9 is joining (it asked for a snapshot)\n");
}

}  // namespace
}  // namespace reckon::server
