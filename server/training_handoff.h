// The node's side of the training thread (docs/architecture.md "The gossip
// node in parts"): what it hands that thread to apply (accepted peer
// messages, or a snapshot's weights after a re-join), what it hears back
// (replica checks, steps, done), and where a re-join should fetch from.
// The node decides when each happens; this part keeps the state, so that
// what was queued is taken once, a snapshot's weights replace what they
// include, and a passed check is announced once.
//
// Not thread-safe: GossipNode owns one and calls it under its lock (the
// training thread reaches it only through the node's methods).
#ifndef RECKON_SERVER_TRAINING_HANDOFF_H_
#define RECKON_SERVER_TRAINING_HANDOFF_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codec/update_message.h"
#include "server/member.h"
#include "server/version_vector.h"

namespace reckon::server {

// What the training thread must apply before its next step.
struct Received {
  // Set after a re-join: load these weights first (they already include
  // every message in `updates`' predecessors and our own messages).
  std::optional<std::vector<int64_t>> replace_weights;
  std::vector<std::shared_ptr<const codec::DecodedUpdate>> updates;
  // When the node accepted each of `updates` (validated and in order): the
  // start of the apply latency.
  std::vector<std::chrono::steady_clock::time_point> accepted_at;
  // The replica checksum the training replica must have once it applied
  // the above (on top of everything taken before) and its own messages, and
  // the version vector it is then at (only when asked for: a copy).
  uint64_t checksum = 0;
  std::optional<VersionMap> cut;
  // A snapshot waits for the training replica (the node keeps no mirror):
  // once the above is applied, its weights at `cut` (set) go to
  // TrainingPort::OfferTrainingCut.
  bool weights_wanted = false;
};

// The training replica's weights at a step boundary, for the snapshots of a
// node that keeps no mirror.
struct TrainingCut {
  VersionMap at;
  uint64_t checksum = 0;  // the ledger's at `at`
  std::vector<int64_t> weights;
  std::chrono::steady_clock::time_point made;
};

class TrainingHandoff {
 public:
  // --- what the training thread applies ---
  // A peer message the node accepted into its replica.
  void Queue(std::shared_ptr<const codec::DecodedUpdate> decoded,
             std::chrono::steady_clock::time_point accepted_at);
  // A snapshot was installed: its weights (which include every message
  // queued so far) replace what was queued.
  void ReplaceWeights(std::vector<int64_t> weights);
  // Whether something waits to be taken (quiescence: still applying).
  bool pending() const { return !received_.updates.empty() || received_.replace_weights; }
  // Moves out what was queued; `checksum` and `cut` are the node's replica
  // as of now (what the training replica is at once it applied the rest).
  // Received::weights_wanted says whether a cut of it is wanted.
  Received Take(uint64_t checksum, std::optional<VersionMap> cut = std::nullopt);

  // --- the training replica, where the node keeps no mirror ---
  // A snapshot waits for the training replica's weights: the next Take
  // says so, until a cut is offered.
  void WantWeights() { weights_wanted_ = true; }
  bool weights_wanted() const { return weights_wanted_; }
  void OfferWeights(std::shared_ptr<const TrainingCut> cut);
  // The cut made at or after `since`, if one is kept.
  std::shared_ptr<const TrainingCut> CutSince(std::chrono::steady_clock::time_point since) const;
  // Lets go of a cut made before `before` (or of any, by default: after a
  // re-join, it is of a replica that is gone).
  void DropCut(
      std::chrono::steady_clock::time_point before = std::chrono::steady_clock::time_point::max());
  // The training replica's SHA-256 at a vector, for quiescence: asked by
  // the node when it settles, given by the training thread.
  void WantHash() { hash_wanted_ = true; }
  bool hash_wanted() const { return hash_wanted_; }
  void RecordHash(VersionMap at, std::string hash);
  // The hash recorded at exactly `at`, if that is where it was taken.
  std::optional<std::string> HashAt(const VersionMap& at) const;

  // --- what the training thread reports ---
  // A replica check took `ms`; a passed one (at `at`, checksum `measured`)
  // is announced in the next heartbeat, once.
  void RecordCheck(const VersionMap& at, uint64_t measured, bool passed, double ms);
  // The passed check not announced yet, if any; taking it announces it.
  std::optional<Member::Check> TakeCheckToAnnounce();
  double last_check_ms() const { return last_check_ms_; }
  void SetLocalSteps(uint64_t steps) { local_steps_ = steps; }
  uint64_t local_steps() const { return local_steps_; }
  void SetDone(uint64_t local_steps);
  bool done() const { return done_; }

  // --- re-joins ---
  // Where the training thread should fetch a snapshot from; none while no
  // re-join is due.
  const std::optional<std::string>& rejoin_source() const { return rejoin_source_; }
  // A re-join is due (we fell out of a log, or our mirror failed a check):
  // from `source`, unless one is already under way (the first reason wins).
  void AskRejoin(std::string source);
  // The re-join under way goes to `source` instead (the first failed).
  void SwitchRejoin(std::string source) { rejoin_source_ = std::move(source); }
  // A snapshot was installed: no re-join is due.
  void RejoinDone() { rejoin_source_.reset(); }

 private:
  Received received_;
  std::optional<Member::Check> check_to_announce_;
  double last_check_ms_ = 0;
  uint64_t local_steps_ = 0;
  bool done_ = false;
  std::optional<std::string> rejoin_source_;
  bool weights_wanted_ = false;
  std::shared_ptr<const TrainingCut> cut_;
  bool hash_wanted_ = false;
  std::optional<std::pair<VersionMap, std::string>> hash_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_TRAINING_HANDOFF_H_
