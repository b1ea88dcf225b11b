// The gossip node's own fixed-point replica (NodeOptions::Replica::kMirror),
// with the messages accepted into it but not added yet.
//
// Accepting a message (AppliedState::Apply: the version vector and the
// checksum ledger move) happens under the node's lock; adding it to the
// weights, a cache miss per update and the bulk of the receive path's work
// on a node with a mirror, happens after, off that lock (the node thread,
// AddQueued), so the training thread and the service do not wait behind a
// slice of messages being added. Whoever reads the weights (Read) first adds
// what is still queued, so every read sees exactly the messages the version
// vector holds.
//
// Threads: thread-safe. Lock order: the node's lock (NodeCore::mu) before
// this one's, never the other way; Queue, Read and Replace are called with
// the node's lock held (so nothing is accepted meanwhile), AddQueued without
// it. Errors: a queued message that cannot be added (validated against this
// model before it was queued, so a bug) is reported by AddQueued, named.
#ifndef RECKON_SERVER_MIRROR_H_
#define RECKON_SERVER_MIRROR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "codec/fixed_point.h"
#include "codec/update_message.h"
#include "server/version_vector.h"

namespace reckon::server {

class Mirror {
 public:
  using Prefetch = codec::FixedPointReplica::Prefetch;
  // How to stripe one message's add over threads (nullptr: this thread).
  using StripesFor = std::function<codec::ParallelFor(const codec::DecodedUpdate&)>;

  // `prefetch`: how messages are added (kOff only for the benchmark's
  // "before" path).
  Mirror(codec::FixedPointReplica replica, Prefetch prefetch);
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;

  uint64_t param_count() const { return param_count_; }

  // `seq` of `origin`, accepted: queued to be added, after everything queued
  // before it. REQUIRES: `decoded` was validated against this model
  // (ValidateUpdate, or the publisher's own encoding).
  void Queue(const OriginKey& origin, uint64_t seq,
             std::shared_ptr<const codec::DecodedUpdate> decoded);

  // What adding messages found since the last AddQueued: weights wrapped
  // past the int64 range (a hostile or broken peer's step), and messages
  // that could not be added (a bug: they were validated).
  struct Wrapped {
    OriginKey origin;
    uint64_t seq = 0;
    uint64_t weights = 0;
  };
  struct Report {
    std::vector<Wrapped> wrapped;
    std::vector<absl::Status> failed;
  };
  // Adds everything queued, in order, each message striped as `stripes_for`
  // says; returns what this and any Read or Replace since found.
  Report AddQueued(const StripesFor& stripes_for = nullptr);

  // Calls `read` with the weights, everything queued added (on this thread).
  void Read(absl::FunctionRef<void(const codec::FixedPointReplica&)> read);
  std::vector<int64_t> CopyWeights();

  // Replaces the weights by `weights`, then adds `replay` in order; what was
  // queued is added first, so that on any error (weights of another size, a
  // replayed message that does not apply) the weights are as they were.
  absl::Status Replace(std::span<const int64_t> weights,
                       std::span<const std::shared_ptr<const codec::DecodedUpdate>> replay);

 private:
  struct Queued {
    OriginKey origin;
    uint64_t seq = 0;
    std::shared_ptr<const codec::DecodedUpdate> decoded;
  };
  void AddLocked(const Queued& q, const StripesFor& stripes_for) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddAllLocked(const StripesFor& stripes_for) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t param_count_;
  const Prefetch prefetch_;
  absl::Mutex mu_;
  codec::FixedPointReplica replica_ ABSL_GUARDED_BY(mu_);
  std::deque<Queued> queued_ ABSL_GUARDED_BY(mu_);
  Report report_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_MIRROR_H_
