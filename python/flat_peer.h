// A reckon peer over a flat vector of float32 parameters, for a framework
// that owns the model and its optimizer (PyTorch: issue 36, python/). The
// framework steps; the peer turns what the step changed into Strom's +-tau
// updates and keeps the parameters on the cluster's fixed-point replica:
//
//   after the framework's optimizer step, Step(params):
//     residual += params - replica         (what this peer's step changed)
//     words     = the +-tau steps the residual crossed (it keeps the rest)
//     replica  += words; published to every peer (Rice, its checksum)
//     replica  += the peers' messages accepted since the last step
//     params    = replica                  (bit for bit the cluster's)
//
// The gossip, joins, snapshots, quiescence and replica checks are the C++
// worker's own (worker::GossipPeers over server::GossipNode): a flat peer is
// a member like any reckon-worker whose fingerprint matches.
//
// Threads: one thread calls every method (the framework's training loop);
// the gossip node runs its own.
#ifndef RECKON_PYTHON_FLAT_PEER_H_
#define RECKON_PYTHON_FLAT_PEER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/fixed_point.h"
#include "model/backend.h"
#include "proto/reckon.pb.h"
#include "worker/gossip_peers.h"
#include "worker/observability.h"

namespace reckon::python {

// The replica as a flat fixed-point vector and its float32 view: the parts
// of model::Backend a peer uses (load, read, hash, apply). The forward and
// backward passes are the framework's: TrainStep and Evaluate are
// kUnimplemented. Training thread only.
class FlatReplica final : public model::Backend {
 public:
  static absl::StatusOr<std::unique_ptr<FlatReplica>> Create(uint64_t param_count,
                                                             int fraction_bits);

  std::span<const float> floats() const { return replica_.weights(); }
  std::span<const int64_t> quanta() const { return replica_.quanta(); }

  std::string Describe() const override { return "flat (a framework's parameters)"; }
  absl::Status LoadWeights(std::span<const int64_t> quanta) override {
    return replica_.Load(quanta);
  }
  absl::StatusOr<std::vector<int64_t>> ReadWeights() const override {
    return std::vector<int64_t>(replica_.quanta().begin(), replica_.quanta().end());
  }
  absl::StatusOr<std::string> WeightHash() const override { return replica_.WeightHash(); }
  uint64_t WeightsWrapped() const override { return replica_.wrapped(); }
  absl::Status ApplyUpdates(int64_t step_quanta, std::span<const uint32_t> words) override {
    return replica_.Apply(step_quanta, words);
  }
  absl::Status ApplyDense(std::span<const int64_t> quanta) override {
    return replica_.ApplyDense(quanta);
  }
  // The residual is the peer's (FlatPeer), not the replica's.
  absl::StatusOr<std::vector<float>> ReadResidual() const override { return std::vector<float>(); }
  absl::StatusOr<std::vector<float>> ReadOptimizerState() const override {
    return std::vector<float>();
  }
  absl::Status LoadTrainingState(std::span<const float>, std::span<const float>) override {
    return absl::UnimplementedError("a flat replica keeps no training state");
  }
  absl::StatusOr<model::BatchStats> TrainStep(const float*, const int32_t*, int, float,
                                              model::Emission*) override {
    return absl::UnimplementedError("a flat replica does not train: its framework does");
  }
  void SetMomentum(double) override {}
  void SetThresholdStep(const codec::ThresholdStep&) override {}
  absl::StatusOr<model::BatchStats> Evaluate(const float*, const int32_t*, size_t) override {
    return absl::UnimplementedError("a flat replica does not evaluate: its framework does");
  }

 private:
  explicit FlatReplica(codec::FixedPointReplica replica) : replica_(std::move(replica)) {}
  codec::FixedPointReplica replica_;
};

struct FlatPeerOptions {
  // The node (id, incarnation, seeds, fingerprint: its `model` names the
  // parameters' shapes, its `param_count` their number), listen address,
  // token or TLS, timeouts: as reckon-worker's flags make them.
  worker::PeerOptions peers;
  // The threshold step, in weight units (--threshold).
  double threshold = 0.005;
  v1::Codec wire_codec = v1::CODEC_THRESHOLD_RICE;
  // /metrics, /healthz, /readyz and /status on this address, as
  // reckon-worker's --http-listen (empty: none; port 0: a free one).
  std::string http_listen;
  // Set (SIGTERM): a join or a wait ends promptly, Finish says kCancelled
  // (null: never). PeerOptions::stop is set to it.
  const std::atomic<bool>* stop = nullptr;
};

class FlatPeer {
 public:
  // Joins the cluster (worker::GossipPeers::Create: a snapshot from a peer
  // that has trained, else `initial`). `initial`: the parameters every peer
  // starts from, param_count of them (fingerprint().param_count()),
  // rounded to the fixed-point grid. `log`: join and progress lines.
  static absl::StatusOr<std::unique_ptr<FlatPeer>> Create(FlatPeerOptions options,
                                                          std::span<const float> initial,
                                                          std::ostream& log);
  ~FlatPeer();

  // After the framework's optimizer step (see above); `params` (param_count
  // floats) then hold the replica. kInvalidArgument naming the first
  // parameter that is NaN or Inf, with nothing published and `params` left
  // as they were; kInvalidArgument for another count. `samples` and
  // `loss_sum` (the step's, when the framework says) go to /metrics.
  absl::Status Step(std::span<float> params, int samples = 0, double loss_sum = 0);
  // Training is over: waits for the cluster's final agreement (every peer
  // done, the same version vector, the same weight hash) and writes the
  // final replica into `params`. kCancelled once `*stop` is set (SIGTERM).
  absl::Status Finish(std::span<float> params, const std::atomic<bool>* stop = nullptr);
  // Writes the replica into `params` (after a join, before the first step).
  absl::Status ReadInto(std::span<float> params) const;

  uint64_t param_count() const { return param_count_; }
  uint64_t steps() const { return steps_; }
  uint64_t updates_sent() const { return updates_sent_; }
  uint64_t bytes_sent() const { return bytes_sent_; }
  absl::StatusOr<std::string> WeightHash() const { return replica_->WeightHash(); }
  worker::GossipPeers& peers() { return *peers_; }
  // The HTTP endpoint's port (0: none).
  int http_port() const { return observability_ ? observability_->port() : 0; }

 private:
  FlatPeer() = default;
  absl::Status CheckCount(std::span<const float> params) const;

  FlatPeerOptions options_;
  // Before the peers: the endpoint outlives the node it reads (detached in
  // the destructor first).
  std::unique_ptr<worker::Observability> observability_;
  uint64_t param_count_ = 0;
  codec::ThresholdStep step_;
  std::unique_ptr<FlatReplica> replica_;
  std::unique_ptr<worker::GossipPeers> peers_;
  std::vector<float> residual_;
  v1::Update message_;
  codec::DecodedUpdate decoded_;
  std::vector<uint32_t> words_;
  uint64_t steps_ = 0;
  std::chrono::steady_clock::time_point last_step_ = std::chrono::steady_clock::now();
  uint64_t updates_sent_ = 0;
  uint64_t bytes_sent_ = 0;
};

}  // namespace reckon::python

#endif  // RECKON_PYTHON_FLAT_PEER_H_
