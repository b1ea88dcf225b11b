// The Snapshot call's server side: a reactor that streams one snapshot
// (a join probe's header, a witness's answer, a whole cut or one stripe of
// a kept cut; docs/protocol.md section 7), and the deadlines every such
// call must meet.
//
// Threads: the reactor on gRPC's threads and the service thread (Start);
// SnapshotDeadlines on any thread. Errors: a call ends with a gRPC status
// naming what is wrong (not served yet, refused, past its deadline).
#ifndef RECKON_SERVER_SNAPSHOT_WRITER_H_
#define RECKON_SERVER_SNAPSHOT_WRITER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "proto/reckon.grpc.pb.h"
#include "server/grpc_streams.h"
#include "server/member.h"
#include "server/node_service.h"
#include "server/snapshot_cuts.h"
#include "server/version_vector.h"

namespace reckon::server {

// Snapshot calls in flight and when each must be done by
// (TransportOptions::snapshot_deadline). Any thread: gRPC's on creation,
// the reactor's OnDone on removal, the service thread's sweep.
class SnapshotDeadlines {
 public:
  void Add(const void* call, grpc::CallbackServerContext* context, Clock::time_point deadline) {
    absl::MutexLock l(&mu_);
    calls_[call] = {context, deadline};
  }
  // REQUIRES: before the call's reactor is deleted (its context with it).
  void Remove(const void* call) {
    absl::MutexLock l(&mu_);
    calls_.erase(call);
  }
  // Cancels the calls past their deadline (each once); how many.
  int CancelExpired(Clock::time_point now) {
    absl::MutexLock l(&mu_);
    int cancelled = 0;
    for (auto& [call, entry] : calls_) {
      if (entry.deadline > now) continue;
      entry.context->TryCancel();  // the context lives until Remove: under mu_
      entry.deadline = Clock::time_point::max();
      ++cancelled;
    }
    return cancelled;
  }

 private:
  struct Entry {
    grpc::CallbackServerContext* context;
    Clock::time_point deadline;
  };
  absl::Mutex mu_;
  std::map<const void*, Entry> calls_ ABSL_GUARDED_BY(mu_);
};

// Weight bytes per snapshot chunk: 1 MiB, or less under a smaller frame cap
// (--max-message-mb 1): a chunk's framing (its field's tag and length, the
// message's) must fit beside them, or the transport's own limit refuses
// the chunk. Whole weights (a multiple of 8).
size_t SnapshotChunkBytes(int max_message_bytes);

// Streams a snapshot: header, then the weights in chunks of about 1 MiB; striped,
// the weights of one stripe (server/snapshot_cuts.h). Created on a gRPC
// thread; Start runs on the service thread (the copy and SHA-256 of the
// replica are MiBs of work that must not hold up gRPC's threads).
class SnapshotWriter final : public grpc::ServerWriteReactor<v1::SnapshotChunk> {
 public:
  // `cutting`: the service's count of calls cutting the replica now, held
  // up while this one lives (null for a header or a stripe of a kept cut).
  // `deadlines`: where the call is registered until OnDone (it must end
  // by `deadline`). `chunk_bytes`: weight bytes per chunk (SnapshotChunkBytes).
  SnapshotWriter(const v1::SnapshotRequest& request, SnapshotCuts* cuts,
                 std::shared_ptr<std::atomic<int>> live, std::shared_ptr<std::atomic<int>> cutting,
                 SnapshotDeadlines* deadlines, grpc::CallbackServerContext* context,
                 Clock::time_point deadline, size_t chunk_bytes,
                 std::chrono::milliseconds cut_wait = std::chrono::milliseconds(30000));
  // Ends the call before it started (the service is too busy).
  void Refuse(const grpc::Status& status) { Finish(status); }
  // Starts the call, or says kWaiting: the node's cut is not there yet (a
  // worker's training thread cuts its replica at its next step boundary:
  // NodeService::Snapshot::pending). The service calls Start again, on its
  // thread, until it is not waiting; the call then ends on its own (its
  // writes, its cancellation, or `cut_wait` since it was created:
  // UNAVAILABLE, naming why).
  enum class Progress { kStarted, kWaiting };
  Progress Start(NodeService* node);
  void OnWriteDone(bool ok) override;
  void OnCancel() override { cancelled_.store(true); }
  void OnDone() override {
    deadlines_->Remove(this);
    delete this;
  }

 private:
  // A stripe of a kept cut: its header, then its range of the weights.
  void StartStripe();
  // The bytes stripe `stripe` of the cut carries (all of them unstriped).
  void BeginWeights(uint32_t stripe);

  const size_t chunk_bytes_;
  SnapshotDeadlines* const deadlines_;
  StreamCount count_;
  std::optional<StreamCount> cutting_;
  SnapshotCuts* const cuts_;
  std::shared_ptr<const SnapshotCut> cut_;  // null: header only, or refused
  v1::SnapshotChunk chunk_;
  size_t offset_ = 0;
  size_t end_ = 0;
  const bool header_only_;
  const bool for_export_;  // SnapshotRequest.for_export: the header carries the input
  const uint32_t stripes_;
  const uint64_t cut_id_;
  const uint32_t stripe_;
  const std::optional<VersionMap> checksum_at_;  // a witness is asked
  const Clock::time_point asked_at_;             // when the call came
  const std::chrono::milliseconds cut_wait_;
  std::atomic<bool> cancelled_{false};
};

// A Snapshot call refused before it started (its status says why). The
// reactor deletes itself when gRPC is done with it.
grpc::ServerWriteReactor<v1::SnapshotChunk>* RefuseSnapshot(const grpc::Status& status);

}  // namespace reckon::server

#endif  // RECKON_SERVER_SNAPSHOT_WRITER_H_
