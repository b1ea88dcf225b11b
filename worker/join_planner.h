// Where a worker's first join takes its replica from (worker/gossip_peers.h
// describes the whole join): the seeds are probed (a header-only snapshot
// request each) until the answers are conclusive, then
//   - the most advanced seed that answered, with the seeds that can witness
//     its cut (members other than it, not joining), or a join by replay
//     from it (MayJoinByReplay);
//   - or a start from the seed's weights, when every seed answered and
//     none has trained (or with --bootstrap), never with
//     join_after_messages.
// Silence is not evidence: while a seed does not answer and none that did
// has trained, it probes again with backoff, up to the join timeout.
//
// The probe is injected: GossipPeers gives it server::FetchSnapshot over
// gRPC, tests give it scripted answers (tests/join_planner_test.cc: no
// sockets).
//
// Threads: the joining thread; Find blocks (probes, backoff) until the
// answers are conclusive, the join times out (kUnavailable) or `stop` is
// set (kCancelled). A peer of another cluster (fingerprint, token, TLS
// identity) is kFailedPrecondition naming it.
#ifndef RECKON_WORKER_JOIN_PLANNER_H_
#define RECKON_WORKER_JOIN_PLANNER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/grpc_clients.h"
#include "server/version_vector.h"

namespace reckon::worker {

// The rules of a first join (PeerOptions' join fields).
struct JoinRules {
  bool bootstrap = false;
  uint64_t join_after_messages = 0;
  std::string join_after_why;
  std::chrono::seconds join_timeout{0};  // 0: probe for ever
  const std::atomic<bool>* stop = nullptr;
};

// Where a first join loads its snapshot from, and who witnesses it.
struct JoinSource {
  std::string address;  // empty: start from the seed's weights
  std::vector<std::string> witnesses;
  // What each seed that answered said ("ADDRESS (ID: N messages applied)",
  // or joining), for the log: a start from the seed's weights names the
  // answers it rests on.
  std::vector<std::string> answers;
  // A join by replay (MayJoinByReplay): the source's cut and its bytes;
  // empty and 0 when the snapshot is to be loaded.
  server::VersionMap replay_cut;
  uint64_t replay_bytes = 0;
};

using SeedProbes = std::vector<absl::StatusOr<server::FetchedSnapshot>>;

class JoinPlanner {
 public:
  // One header-only snapshot request to each seed (all at once), the
  // answers in the seeds' order.
  using Probe = std::function<SeedProbes(const std::vector<std::string>& seeds)>;

  // `own_initial`: the SHA-256 hex of this worker's initial weights (empty:
  // no join by replay). `log`: the waiting lines.
  JoinPlanner(JoinRules rules, std::string own_initial, Probe probe, std::ostream* log);

  // Probes the seeds but `refused` until conclusive (see above); the
  // join's timeout counts from `start`. A refused seed had trained, so with
  // one the worker never starts from the seed's weights.
  absl::Status Find(const std::vector<std::string>& seeds, const std::set<std::string>& refused,
                    std::chrono::steady_clock::time_point start, JoinSource* source) const;

  // kUnavailable, `why` and the timeout, once the join has taken the join
  // timeout (never with 0).
  absl::Status UnlessTimedOut(std::chrono::steady_clock::time_point start,
                              const std::string& why) const;

  // One round of probes read: the most advanced seed and its witnesses,
  // the most messages any applied, and who did not answer. A peer of
  // another cluster is kFailedPrecondition.
  static absl::Status ChooseSource(const std::vector<std::string>& seeds, const SeedProbes& probes,
                                   const std::string& own_initial, JoinSource* source,
                                   uint64_t* best_total, std::vector<std::string>* silent);

  // Whether a first join may start from its own initial weights (SHA-256
  // hex `own_initial`) and be sent the cut of probe `source` by the logs
  // instead of loading its snapshot: the source's log holds the whole cut
  // in fewer bytes than the weights (its replay_bytes), its initial weights
  // are ours, and no other seed that answered (not joining) names other
  // initial weights (one that joined from a snapshot names none).
  static bool MayJoinByReplay(const std::string& own_initial, size_t source,
                              const SeedProbes& probes);

 private:
  bool Stopped() const { return rules_.stop != nullptr && rules_.stop->load(); }
  // The line said while waiting (every 5 s) and the timeout's error.
  void SayWaiting(int round, uint64_t best_total, const std::string& unanswered) const;
  absl::Status TimedOut(uint64_t best_total, const std::vector<std::string>& silent) const;

  const JoinRules rules_;
  const std::string own_initial_;
  const Probe probe_;
  std::ostream* log_;
};

// The messages a version vector counts, all origins together.
uint64_t TotalSeqs(const server::VersionMap& map);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_JOIN_PLANNER_H_
