// When a node may end (docs/gossip.md "Ending: quiescence"): a cluster-wide
// agreement in two phases, as pure functions of one node's state and its
// member table, so that each rule is tested on its own (tests/server/).
//
//   Settled (phase one): this node finished training, has nothing left to
//   apply, reached the cluster (when it has seeds other than itself), no
//   worker that asked it for a snapshot is still on its way in, and every
//   live member it knows finished at exactly its version vector.
//   Quiescent (phase two): it is settled with its weight hash taken at its
//   current vector, every live member reports itself settled at the same
//   vector with the same hash, and those, with this node, are a majority of
//   the members that have not left (dead ones count: a node cannot tell
//   "crashed" from "cut off and training on"), so that at most one side of
//   a partition ever ends. A dead member nobody ever heard (Member::vouched
//   false: only named in a member list) counts for nothing. A dead member whose last word was
//   "settled at your vector with your hash" agreed (its Leave was lost).
//
// Thread-compatible: the node calls these under its lock.
#ifndef RECKON_SERVER_QUIESCENCE_H_
#define RECKON_SERVER_QUIESCENCE_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "server/member.h"
#include "server/version_vector.h"

namespace reckon::server {

struct LocalQuiescence {
  std::string node_id;
  bool training_done = false;
  bool applying = false;  // received messages the trainer has not applied yet
  // It has seeds other than itself and has never completed a handshake:
  // its messages reached nobody.
  bool unreached = false;
  // Workers that asked this node for a snapshot (to join) and have not
  // connected yet, within one failure timeout of their last request.
  std::vector<std::string> joining;
  VersionMap applied;
  // Phase one as last recorded, the vector it held at and the replica's
  // SHA-256 there.
  bool settled = false;
  VersionMap settled_at;
  std::string settled_hash;
};

// This node's phase one as last recorded (at each tick): whether it is
// settled, the vector it settled at, and the replica's SHA-256 there. The
// hash of the whole replica is taken only when the node settles at a new
// vector, i.e. a few times at the end of a run.
class Settlement {
 public:
  // Records phase one's verdict `settled` at `applied`; `hash` is called
  // only when the hash must be taken (settled at a vector it was not
  // settled at). True when it was. A hash not there yet (nullopt: the
  // training replica is hashed on its own thread) leaves it unsettled.
  bool Record(bool settled, const VersionMap& applied,
              const std::function<std::optional<std::string>()>& hash);
  bool settled() const { return settled_; }
  const VersionMap& at() const { return at_; }
  const std::string& hash() const { return hash_; }
  // Settled, at exactly `applied` (what a heartbeat announces).
  bool SettledAt(const VersionMap& applied) const { return settled_ && SameVersions(at_, applied); }

 private:
  bool settled_ = false;
  VersionMap at_;
  std::string hash_;
};

// m's vector and ours are the same, but for the origins one of the two
// refused past --max-origins (Member::refused_here, refused_there): those
// it can never apply, and the weight hashes say whether they moved anything.
bool VersionsAgree(const Member& m, const VersionMap& ours);
// Phase one; `*why` says what it waits for when false.
bool Settled(const LocalQuiescence& self, const MemberMap& members, std::string* why);
// Phase two (implies phase one).
bool Quiescent(const LocalQuiescence& self, const MemberMap& members, std::string* why);
// The loud line when `m` is settled at our settled vector with another hash.
std::optional<std::string> Divergence(const LocalQuiescence& self, const Member& m);

}  // namespace reckon::server

#endif  // RECKON_SERVER_QUIESCENCE_H_
