// What the applied messages make at the node (docs/architecture.md
// "Words"): the version vector, the checksum ledger and, on a node that
// keeps one, the fixed-point mirror, which move together. A message is
// applied to all three or to none, once, and only as the next of its
// origin (to the mirror it is queued, and added off the node's lock:
// server/mirror.h); a snapshot replaces all three, with the log's messages
// beyond its cut replayed, or changes nothing. Whatever decides *whether* a message is
// applied (validation, signatures, the origin cap, early arrivals) is the
// node's; this part keeps the three consistent.
//
// A worker's node keeps no mirror (NodeOptions::Replica::kTrainingThread):
// its training thread's replica is the only one, and this part keeps the
// vector and the ledger alone; a snapshot's replay then hands the replayed
// messages back, for the training thread to apply after the snapshot's
// weights.
//
// Not thread-safe: the node's core owns one and calls it under its lock
// (NodeCore::mu); the mirror it shares is thread-safe on its own.
#ifndef RECKON_SERVER_APPLIED_STATE_H_
#define RECKON_SERVER_APPLIED_STATE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codec/fixed_point.h"
#include "codec/update_message.h"
#include "codec/weight_checksum.h"
#include "server/checksum_ledger.h"
#include "server/message_log.h"
#include "server/mirror.h"
#include "server/version_vector.h"

namespace reckon::server {

class AppliedState {
 public:
  // `mirror`: the initial weights, no message applied. `checksum` measures
  // weights (the cluster's seed): the initial ones' is the ledger's start. `prefetch`: how
  // messages are added (kOff only for the benchmark's "before" path).
  using Prefetch = Mirror::Prefetch;
  AppliedState(codec::FixedPointReplica mirror, const codec::WeightChecksum& checksum,
               Prefetch prefetch = Prefetch::kOn);
  // No mirror: `initial_checksum` is the checksum of the initial weights.
  AppliedState(uint64_t param_count, uint64_t initial_checksum);

  const VersionMap& applied() const { return applied_; }
  const ChecksumLedger& ledger() const { return ledger_; }
  bool has_mirror() const { return mirror_ != nullptr; }
  uint64_t param_count() const { return param_count_; }
  // The mirror (null without one): the same object for this one's life, so
  // that its holder can add what is queued without the node's lock.
  const std::shared_ptr<Mirror>& mirror() const { return mirror_; }
  // The replica checksum the applied messages give (docs/protocol.md 4a).
  uint64_t checksum() const { return ledger_.total(); }

  // Applies seq `seq` of `origin` (decoded, and `contribution` its checksum
  // contribution, both checked by the caller against this model): the
  // vector and the ledger move, and the mirror queues it (Mirror::Queue;
  // weights wrapped past the int64 range are reported when it is added).
  // kFailedPrecondition, and nothing changed, unless it is the next of its
  // origin (seq == applied + 1).
  absl::Status Apply(const OriginKey& origin, uint64_t seq, uint64_t contribution,
                     std::shared_ptr<const codec::DecodedUpdate> decoded);

  // Replaces the replica by `weights` at `cut` whose checksum is `checksum`
  // (measured by the caller), then replays what `log` holds beyond the cut,
  // in order per origin. On any error (weights of another size, a logged
  // message that does not replay) nothing changed. Without a mirror
  // `weights` are not kept (the caller hands them to the training thread)
  // and `replayed` (not null then) gets the replayed messages, decoded, in
  // the order they apply after the weights.
  absl::Status Install(
      std::span<const int64_t> weights, const VersionMap& cut, uint64_t checksum,
      const MessageLog& log,
      std::vector<std::shared_ptr<const codec::DecodedUpdate>>* replayed = nullptr);

 private:
  std::shared_ptr<Mirror> mirror_;
  uint64_t param_count_;
  VersionMap applied_;
  ChecksumLedger ledger_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_APPLIED_STATE_H_
