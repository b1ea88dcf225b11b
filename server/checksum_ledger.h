// What the replica checksum (codec/weight_checksum.h) must be, at this node's
// version vector and at any recent vector behind it: the running divergence
// check (docs/gossip.md "Divergence detection").
//
// The total is the checksum of the initial weights (or of a snapshot) plus
// the contribution of every message applied since. For each origin the ledger
// also keeps the running sum of its recent messages' contributions, so that
// the checksum at another vector V (a peer's, or the cut the training thread
// applied) is derived without the weights:
//
//   C(V) = total - sum over origins o of (sum of contributions of o's seqs in (V[o], ours[o]])
//
// which needs, for every origin, V[o] within the history kept for o (the last
// `history_per_origin` seqs, and never before a snapshot's cut).
//
// Not thread-safe: the node calls it under its lock.
#ifndef RECKON_SERVER_CHECKSUM_LEDGER_H_
#define RECKON_SERVER_CHECKSUM_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>

#include "server/version_vector.h"

namespace reckon::server {

class ChecksumLedger {
 public:
  explicit ChecksumLedger(size_t history_per_origin = 8192);

  // Starts over at `total` for a replica that applied exactly `at` (the
  // initial weights with an empty vector, or a snapshot's cut). Nothing
  // before `at` can be derived afterwards.
  void Reset(uint64_t total, const VersionMap& at);
  // One more message applied. REQUIRES: seq is the next for `origin` (1 for
  // an origin not seen yet).
  void Add(const OriginKey& origin, uint64_t seq, uint64_t contribution);

  uint64_t total() const { return total_; }
  // The checksum at `v`, or nullopt when it cannot be derived: some origin
  // of `v` is ahead of this ledger, or behind the history it keeps.
  std::optional<uint64_t> At(const VersionMap& v) const;
  // True when this ledger has applied at least `v` (every origin of `v` at or
  // past its seq): a nullopt from At is then for good, not "not yet".
  bool Passed(const VersionMap& v) const;

 private:
  struct History {
    uint64_t last_seq = 0;
    // sums[k] = running sum of contributions up to seq first_seq + k, relative
    // to an arbitrary origin value (only differences are used). Holds seqs
    // first_seq .. last_seq.
    uint64_t first_seq = 0;
    std::deque<uint64_t> sums;
  };

  size_t history_per_origin_;
  uint64_t total_ = 0;
  std::map<OriginKey, History> origins_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_CHECKSUM_LEDGER_H_
