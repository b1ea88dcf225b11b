// worker::JoinPlanner, the first join's choice of source, on scripted seed
// answers: no sockets, no node (worker/join_planner.h).
#include "worker/join_planner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <sstream>
#include <thread>

namespace reckon::worker {
namespace {

using Clock = std::chrono::steady_clock;

// A seed's answer to a probe: `node` has applied `messages` (one origin's).
absl::StatusOr<server::FetchedSnapshot> Trained(const std::string& node, uint64_t messages,
                                                bool joining = false) {
  server::FetchedSnapshot p;
  p.header.set_source_node_id(node);
  p.header.set_joining(joining);
  if (messages > 0) p.applied[server::OriginKey{"w9", 1}] = messages;
  return p;
}

// Answers each round with the next of `rounds` (the last again after),
// counting the rounds and the seeds each was asked of.
struct ScriptedSeeds {
  explicit ScriptedSeeds(std::vector<SeedProbes> answers) : rounds(std::move(answers)) {}
  std::vector<SeedProbes> rounds;
  int asked = 0;
  std::vector<std::vector<std::string>> probed;
  JoinPlanner::Probe Probe() {
    return [this](const std::vector<std::string>& seeds) {
      probed.push_back(seeds);
      const SeedProbes& round = rounds[std::min<size_t>(asked++, rounds.size() - 1)];
      return SeedProbes(round.begin(), round.begin() + seeds.size());
    };
  }
};

TEST(JoinPlanner, EveryoneSaysNobodyTrainedStartsFromTheSeedsWeights) {
  ScriptedSeeds seeds{{{Trained("a", 0), Trained("b", 0, /*joining=*/true)}}};
  std::ostringstream log;
  JoinSource source;
  ASSERT_TRUE(JoinPlanner(JoinRules{}, "", seeds.Probe(), &log)
                  .Find({"a:1", "b:1"}, {}, Clock::now(), &source)
                  .ok());
  EXPECT_TRUE(source.address.empty());
  ASSERT_EQ(source.answers.size(), 2u);
  EXPECT_EQ(source.answers[0], "a:1 (a: 0 messages applied)");
  EXPECT_EQ(source.answers[1], "b:1 (b: joining)");
  EXPECT_EQ(seeds.asked, 1);
}

TEST(JoinPlanner, TheMostAdvancedSeedIsTheSourceAndOtherMembersItsWitnesses) {
  ScriptedSeeds seeds{{{Trained("a", 3), Trained("b", 5), Trained("c", 0, /*joining=*/true),
                        Trained("b", 4), absl::UnavailableError("no answer")}}};
  JoinSource source;
  ASSERT_TRUE(JoinPlanner(JoinRules{}, "", seeds.Probe(), nullptr)
                  .Find({"a:1", "b:1", "c:1", "b:2", "d:1"}, {}, Clock::now(), &source)
                  .ok());
  // The witnesses: the other seeds that answered as members, not the
  // source's node under another address, not a joiner, not the silent.
  EXPECT_EQ(source.address, "b:1");
  EXPECT_EQ(source.witnesses, (std::vector<std::string>{"a:1"}));
  EXPECT_TRUE(source.replay_cut.empty());  // no initial weights of ours named
}

TEST(JoinPlanner, SilenceIsNotEvidenceUntilTheTimeoutOrBootstrap) {
  const SeedProbes one_silent = {Trained("a", 0), absl::UnavailableError("connection refused")};
  {
    ScriptedSeeds seeds{{one_silent}};
    JoinRules rules;
    rules.join_timeout = std::chrono::seconds(1);
    std::ostringstream log;
    JoinSource source;
    const absl::Status s =
        JoinPlanner(rules, "", seeds.Probe(), &log).Find({"a:1", "b:1"}, {}, Clock::now(), &source);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("no answer from b:1 (connection refused)"), std::string::npos) << s;
    EXPECT_NE(s.message().find("--bootstrap"), std::string::npos) << s;
    EXPECT_GT(seeds.asked, 1);  // it asked again
    EXPECT_NE(log.str().find("silence is not evidence"), std::string::npos) << log.str();
  }
  {
    ScriptedSeeds seeds{{one_silent}};
    JoinRules rules;
    rules.bootstrap = true;
    JoinSource source;
    ASSERT_TRUE(JoinPlanner(rules, "", seeds.Probe(), nullptr)
                    .Find({"a:1", "b:1"}, {}, Clock::now(), &source)
                    .ok());
    EXPECT_TRUE(source.address.empty());
    EXPECT_EQ(source.answers.back(), "no answer from b:1 (connection refused)");
  }
}

TEST(JoinPlanner, JoinAfterMessagesWaitsForThatManyAndNeverStartsAfresh) {
  ScriptedSeeds seeds{{{Trained("a", 0), Trained("b", 0)},
                       {Trained("a", 4), Trained("b", 9)},
                       {Trained("a", 12), Trained("b", 9)}}};
  JoinRules rules;
  rules.join_after_messages = 10;
  rules.join_after_why = "--start-workers 2";
  std::ostringstream log;
  JoinSource source;
  ASSERT_TRUE(JoinPlanner(rules, "", seeds.Probe(), &log)
                  .Find({"a:1", "b:1"}, {}, Clock::now(), &source)
                  .ok());
  EXPECT_EQ(source.address, "a:1");
  EXPECT_EQ(source.witnesses, (std::vector<std::string>{"b:1"}));
  EXPECT_EQ(seeds.asked, 3);
  EXPECT_NE(log.str().find("until a seed has applied 10 messages"), std::string::npos) << log.str();
}

TEST(JoinPlanner, ARefusedSeedIsNotAskedAndNobodyStartsAfreshAfterIt) {
  ScriptedSeeds seeds{{{Trained("b", 0)}}};
  JoinRules rules;
  rules.join_timeout = std::chrono::seconds(1);
  JoinSource source;
  const absl::Status s = JoinPlanner(rules, "", seeds.Probe(), nullptr)
                             .Find({"a:1", "b:1"}, {"a:1"}, Clock::now(), &source);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("a:1 (refused: a witness contradicted its snapshot)"),
            std::string::npos)
      << s;
  for (const std::vector<std::string>& probed : seeds.probed) {
    EXPECT_EQ(probed, (std::vector<std::string>{"b:1"}));
  }
}

TEST(JoinPlanner, APeerOfAnotherClusterEndsTheJoin) {
  for (const absl::Status& refusal :
       {absl::FailedPreconditionError("fingerprint: model 'x' there but 'y' here"),
        absl::PermissionDeniedError("wrong cluster token"), absl::DataLossError("bad header")}) {
    ScriptedSeeds seeds{{{Trained("a", 3), refusal}}};
    JoinSource source;
    const absl::Status s = JoinPlanner(JoinRules{}, "", seeds.Probe(), nullptr)
                               .Find({"a:1", "b:1"}, {}, Clock::now(), &source);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("refused by peer b:1: " + std::string(refusal.message())),
              std::string::npos)
        << s;
  }
}

TEST(JoinPlanner, AStopEndsTheWaitPromptly) {
  ScriptedSeeds seeds{{{absl::UnavailableError("no answer")}}};
  std::atomic<bool> stop{false};
  JoinRules rules;
  rules.stop = &stop;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop = true;
  });
  JoinSource source;
  const auto start = Clock::now();
  const absl::Status s =
      JoinPlanner(rules, "", seeds.Probe(), nullptr).Find({"a:1"}, {}, start, &source);
  stopper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(JoinPlanner, AJoinByReplayIsChosenWhenTheSourcesLogAndOurStartAgree) {
  const std::string ours(64, 'a');
  auto replayable = [&](const std::string& node, uint64_t messages, const std::string& initial) {
    absl::StatusOr<server::FetchedSnapshot> p = Trained(node, messages);
    p->header.set_initial_sha256(initial);
    p->header.set_replay_bytes(messages * 100);
    return p;
  };
  ScriptedSeeds seeds{{{replayable("a", 7, ours), replayable("b", 3, ours)}}};
  JoinSource source;
  ASSERT_TRUE(JoinPlanner(JoinRules{}, ours, seeds.Probe(), nullptr)
                  .Find({"a:1", "b:1"}, {}, Clock::now(), &source)
                  .ok());
  EXPECT_EQ(source.address, "a:1");
  EXPECT_EQ(TotalSeqs(source.replay_cut), 7u);
  EXPECT_EQ(source.replay_bytes, 700u);
}

// A join by replay is chosen only on the source's word that its log holds
// the cut in fewer bytes than the weights, with our initial weights, and
// against no other seed that answered naming other initial weights (a
// joining seed, or one that joined from a snapshot and names none, says
// nothing either way).
TEST(JoinPlanner, AJoinByReplayNeedsTheSourcesLogAndOurInitialWeightsUncontradicted) {
  const std::string ours(64, 'a');
  const std::string other(64, 'b');
  auto probe = [](const std::string& initial, uint64_t replay_bytes, bool joining = false) {
    server::FetchedSnapshot p;
    p.header.set_initial_sha256(initial);
    p.header.set_replay_bytes(replay_bytes);
    p.header.set_joining(joining);
    return absl::StatusOr<server::FetchedSnapshot>(p);
  };
  using Probes = std::vector<absl::StatusOr<server::FetchedSnapshot>>;
  EXPECT_TRUE(JoinPlanner::MayJoinByReplay(ours, 0, Probes{probe(ours, 900)}));
  // The source cannot serve it, or started elsewhere, or says nothing.
  EXPECT_FALSE(JoinPlanner::MayJoinByReplay(ours, 0, Probes{probe(ours, 0)}));
  EXPECT_FALSE(JoinPlanner::MayJoinByReplay(ours, 0, Probes{probe(other, 900)}));
  EXPECT_FALSE(JoinPlanner::MayJoinByReplay(ours, 0, Probes{probe("", 900)}));
  EXPECT_FALSE(JoinPlanner::MayJoinByReplay("", 0, Probes{probe("", 900)}));
  // A witness that started elsewhere contradicts it.
  EXPECT_FALSE(JoinPlanner::MayJoinByReplay(ours, 0, Probes{probe(ours, 900), probe(other, 0)}));
  EXPECT_FALSE(JoinPlanner::MayJoinByReplay(ours, 1, Probes{probe(other, 0), probe(ours, 900)}));
  // Agreeing, silent, joining or unreachable seeds do not.
  EXPECT_TRUE(JoinPlanner::MayJoinByReplay(
      ours, 1,
      Probes{probe(ours, 0), probe(ours, 900), probe("", 0), probe(other, 0, /*joining=*/true),
             absl::UnavailableError("no answer")}));
  // Out of range, or the source's probe failed.
  EXPECT_FALSE(JoinPlanner::MayJoinByReplay(ours, 1, Probes{probe(ours, 900)}));
  EXPECT_FALSE(JoinPlanner::MayJoinByReplay(ours, 0, Probes{absl::UnavailableError("gone")}));
}

}  // namespace
}  // namespace reckon::worker
