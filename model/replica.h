// The cluster's fixed-point replica as the gossip and the publisher see it:
// load, read, hash and apply (docs/design.md "Dead reckoning"). Every
// training backend (backend.h) is one, holding it beside its residual and
// optimizer state; a framework's flat replica (flat_replica.h) is one that
// does not train.
//
// Threads: not thread-safe; one thread calls every method (the training
// thread, or a framework's loop). Calls are synchronous: what they change
// is changed when they return. Errors: reads return their status (a device
// error), never zeros in place of the values; applies are all or nothing
// as each says.
#ifndef RECKON_MODEL_REPLICA_H_
#define RECKON_MODEL_REPLICA_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "codec/parallel_for.h"
#include "codec/quanta_span.h"
#include "codec/update_message.h"
#include "codec/weight_checksum.h"

namespace reckon::model {

// One decoded Update, for batched apply: a threshold update (step_quanta,
// words) or, when `quanta` is not empty, a quanta codec's (ApplyDense;
// either layout, codec/quanta_span.h).
struct UpdateRef {
  int64_t step_quanta = 0;
  std::span<const uint32_t> words;
  codec::QuantaSpan quanta;
};

class Replica {
 public:
  virtual ~Replica() = default;

  // e.g. "cpu (OpenBLAS, 2 threads)".
  virtual std::string Describe() const = 0;

  // Replaces the replica's parameters (initialization, resume, snapshots).
  virtual absl::Status LoadWeights(std::span<const int64_t> quanta) = 0;
  // What is read from a device can fail (a CUDA error): every read returns
  // its status, never zeros in place of the values.
  virtual absl::StatusOr<std::vector<int64_t>> ReadWeights() const = 0;
  virtual absl::StatusOr<std::string> WeightHash() const = 0;
  // Additions to the replica that passed the int64 range and wrapped since
  // it was made (a member sent a step no training makes; the gossip node
  // counts them in `weights_wrapped`, as a worker's node keeps no mirror to
  // see them). 0 where a backend cannot tell.
  virtual uint64_t WeightsWrapped() const { return 0; }
  // The replica checksum (codec/weight_checksum.h) of the weights. This
  // default reads them to the host; a backend may compute it in place.
  virtual absl::StatusOr<uint64_t> Checksum(const codec::WeightChecksum& checksum) const {
    absl::StatusOr<std::vector<int64_t>> weights = ReadWeights();
    if (!weights.ok()) return weights.status();
    return checksum.Of(*weights);
  }

  // Applies a threshold update to the replica, all or nothing.
  virtual absl::Status ApplyUpdates(int64_t step_quanta, std::span<const uint32_t> words) = 0;
  // Applies this worker's own threshold emission. REQUIRES `words` are this
  // replica's last emission (Backend::TrainStep, FlatReplica::Emit), unchanged (worker/publisher.h
  // calls it after its self-check showed the wire carries exactly them); words made elsewhere go
  // through ApplyUpdates. The same as ApplyUpdates, which this default is; the CUDA backend applies
  // them from the device, where its pass left them, instead of uploading them again
  // (kFailedPrecondition when their count is not the pass's).
  virtual absl::Status ApplyOwnEmission(int64_t step_quanta, std::span<const uint32_t> words) {
    return ApplyUpdates(step_quanta, words);
  }
  // Applies several threshold updates (from many peers) at once. The CUDA
  // backend does it in one launch, all or nothing across the batch; this
  // default applies them in order, each all or nothing, and stops at the
  // first that fails (the error names it; the earlier ones stay applied).
  virtual absl::Status ApplyUpdateBatch(std::span<const UpdateRef> updates) {
    for (size_t m = 0; m < updates.size(); ++m) {
      absl::Status s = updates[m].quanta.empty()
                           ? ApplyUpdates(updates[m].step_quanta, updates[m].words)
                           : ApplyDense(updates[m].quanta);
      if (!s.ok()) return absl::Status(s.code(), absl::StrCat("update ", m, ": ", s.message()));
    }
    return absl::OkStatus();
  }
  // Applies a quanta codec's update (a count of quanta per parameter, in
  // either layout: codec/quanta_span.h), all or nothing.
  virtual absl::Status ApplyDense(codec::QuantaSpan quanta) = 0;

  // Applies this worker's own dense emission (a CODEC_DENSE_FP32 message it
  // made) with the publisher's self-check of it: OK and applied exactly
  // when codec::CheckQuantaUpdate accepts `msg` as the emission its payload
  // is; otherwise that check's error, with the replica unchanged. This
  // default checks on HostThreads(), then applies (ApplyDense): a device
  // replica's apply is on the device anyway. A host replica does both in
  // one walk over the payload (codec::CheckAndApplyDenseUpdate).
  virtual absl::Status ApplyCheckedDense(const v1::Update& msg) {
    if (msg.codec() != v1::CODEC_DENSE_FP32) {
      return absl::InternalError(
          absl::StrCat(v1::Codec_Name(msg.codec()), " is not the dense codec"));
    }
    const codec::QuantaSpan payload = codec::QuantaSpan::DenseFp32(msg.payload());
    if (absl::Status s = codec::CheckQuantaUpdate(msg, payload, HostThreads()); !s.ok()) return s;
    return ApplyDense(payload);
  }

  // The host threads this replica runs its own passes on, lent for a pass
  // its caller makes over a whole emission between two of its calls (the
  // publisher's self-check and CRC): the CPU backend's pool. Null (this
  // default) where there are none to lend: the pass runs on the caller's
  // thread. The same contract as every method: called from the replica's
  // one thread, never during another of its calls, nor from inside a chunk.
  virtual codec::ParallelFor HostThreads() { return nullptr; }
};

}  // namespace reckon::model

#endif  // RECKON_MODEL_REPLICA_H_
