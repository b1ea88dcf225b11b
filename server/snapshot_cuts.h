// Striped snapshots (docs/protocol.md section 7): which parameters each
// stripe carries, and the cuts a source keeps while a joiner fetches their
// other stripes over other connections.
//
// One TCP connection cannot fill a long fat link (its send buffer and
// congestion window bound it: docs/scaling.md "Long fat links"); a joiner
// asks for the snapshot in k stripes, the source cuts it once and serves
// stripe 0 at once, and the joiner fetches stripes 1..k-1 of the same cut
// side by side on k-1 connections of their own. Every stripe is of one
// consistent cut, so the assembled weights match the header's SHA-256.
//
// Threads: SnapshotCuts is thread-safe (its own lock: gRPC's threads and
// the service thread). Errors: a stripe not kept is kNotFound, one out of
// range kInvalidArgument (SnapshotCuts::Take).
#ifndef RECKON_SERVER_SNAPSHOT_CUTS_H_
#define RECKON_SERVER_SNAPSHOT_CUTS_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/reckon.pb.h"

namespace reckon::server {

// A source serves at most this many stripes of one snapshot (asked for
// more, it serves this many).
inline constexpr uint32_t kMaxSnapshotStripes = 16;

// A stripe carries at least this many bytes: striping a smaller snapshot
// costs connections and saves nothing.
inline constexpr uint64_t kMinStripeBytes = uint64_t{1} << 20;

// How many stripes a joiner asks for: `wanted` (at least 1), no more than
// kMaxSnapshotStripes nor than kMinStripeBytes of `param_count` int64
// weights allow.
uint32_t StripesFor(uint64_t param_count, uint32_t wanted);

// Parameters [begin, end).
struct ParamRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Stripe `stripe` (below `stripes`) of `param_count` parameters: the
// stripes are contiguous and in order, together exactly [0, param_count),
// their sizes at most one apart. Source and joiner both compute it.
ParamRange StripeRange(uint64_t param_count, uint32_t stripes, uint32_t stripe);

// A cut kept for its stripes: the header as every stripe carries it
// (cut_id and stripes set; stripe 0) and all the weights.
struct SnapshotCut {
  v1::SnapshotChunk::Header header;
  std::vector<int64_t> weights;
};

// The cuts a source keeps. Each holds a copy of the replica, so they are
// few (`capacity`; a new cut evicts the oldest) and short-lived: a cut goes
// once each of its stripes 1..k-1 was asked for, or `ttl` after it was
// made. A joiner whose cut went asks for a new one. Thread-safe.
class SnapshotCuts {
 public:
  using Clock = std::chrono::steady_clock;
  SnapshotCuts(size_t capacity, std::chrono::milliseconds ttl) : capacity_(capacity), ttl_(ttl) {}

  // Keeps `cut` under a fresh random non-zero id, written into its header.
  std::shared_ptr<const SnapshotCut> Keep(SnapshotCut cut, Clock::time_point now);

  // Stripe `stripe` of the cut `cut_id`. kNotFound when it is not kept
  // (never was, expired, evicted, or all its stripes were asked for);
  // kInvalidArgument when `stripe` is 0 (it came with the cut) or not below
  // the cut's stripes.
  absl::StatusOr<std::shared_ptr<const SnapshotCut>> Take(uint64_t cut_id, uint32_t stripe,
                                                          Clock::time_point now);

  size_t size() const;

 private:
  struct Kept {
    std::shared_ptr<const SnapshotCut> cut;
    Clock::time_point made;
    std::vector<bool> asked;  // per stripe; stripe 0 counts as asked
  };
  void DropExpired(Clock::time_point now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::deque<Kept>::iterator Find(uint64_t cut_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  const std::chrono::milliseconds ttl_;
  mutable absl::Mutex mu_;
  std::deque<Kept> kept_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_SNAPSHOT_CUTS_H_
