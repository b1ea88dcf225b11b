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
// The replica and residual live where the parameters do
// (model/flat_replica.h): in host memory, or on the GPU that holds them
// (cuda/cuda_flat_replica.h; FlatPeerOptions::device), where the step's
// arithmetic runs as kernels and only the emitted words and the peers'
// messages cross to and from the host.
//
// Threads: one thread calls every method (the framework's training loop);
// the gossip node runs its own.
#ifndef RECKON_PYTHON_FLAT_PEER_H_
#define RECKON_PYTHON_FLAT_PEER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/fixed_point.h"
#include "model/flat_replica.h"
#include "proto/reckon.pb.h"
#include "worker/gossip_peers.h"
#include "worker/observability.h"
#include "worker/publisher.h"

namespace reckon::python {

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
  // Where the parameters are: -1, host memory; else the CUDA device of
  // that ordinal, whose memory every `params` span below then points into
  // (kFailedPrecondition from Create when this build has no CUDA;
  // kUnavailable when there is no such device).
  int device = -1;
};

class FlatPeer {
 public:
  // Joins the cluster (worker::GossipPeers::Create: a snapshot from a peer
  // that has trained, else `initial`). `initial`: the parameters every peer
  // starts from, param_count of them (fingerprint().param_count()),
  // rounded to the fixed-point grid; in host memory wherever the
  // parameters are. `log`: join and progress lines.
  static absl::StatusOr<std::unique_ptr<FlatPeer>> Create(FlatPeerOptions options,
                                                          std::span<const float> initial,
                                                          std::ostream& log);
  ~FlatPeer();

  // After the framework's optimizer step (see above); `params` (param_count
  // floats) then hold the replica. kInvalidArgument naming the first
  // parameter that is NaN or Inf, with nothing published and `params` left
  // as they were; kInvalidArgument for another count. `samples` and
  // `loss_sum` (the step's, when the framework says) go to /metrics.
  // When Step returns, `params` are written (on a GPU too).
  absl::Status Step(std::span<float> params, int samples = 0, double loss_sum = 0);
  // Parameters on a GPU: the work the framework enqueued so far on its
  // stream `stream` (a cudaStream_t as an integer; 0 the legacy default
  // stream), such as the optimizer's step, comes before what the next
  // Step, ReadInto or Finish does with the parameters. A no-op for host
  // memory.
  absl::Status OrderAfter(uintptr_t stream) { return replica_->OrderAfter(stream); }
  // Training is over: waits for the cluster's final agreement (every peer
  // done, the same version vector, the same weight hash) and writes the
  // final replica into `params`. kCancelled once `*stop` is set (SIGTERM).
  absl::Status Finish(std::span<float> params, const std::atomic<bool>* stop = nullptr);
  // Writes the replica into `params` (after a join, before the first step).
  absl::Status ReadInto(std::span<float> params);
  // The threshold of the next steps, in weight units: each message carries
  // its own step (Update.step_quanta), so it may change between any two
  // steps (a schedule that follows the learning rate, docs/pytorch.md
  // "Transformers and AdamW"); the residual keeps what it holds.
  // kInvalidArgument (the threshold left as it was) unless it is positive,
  // finite and at least one quantum.
  absl::Status SetThreshold(double threshold);
  double threshold() const { return step_.tau; }

  uint64_t param_count() const { return replica_->param_count(); }
  // FlatPeerOptions::device: -1 host memory, else the CUDA device.
  int device() const { return options_.device; }
  uint64_t steps() const { return publisher_ ? publisher_->published() : 0; }
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
  codec::ThresholdStep step_;
  std::unique_ptr<model::FlatReplica> replica_;
  std::unique_ptr<worker::GossipPeers> peers_;
  // Each step's message: seq = the step, encoded, applied, sent.
  std::optional<worker::Publisher> publisher_;
  std::vector<uint32_t> words_;
  std::chrono::steady_clock::time_point last_step_ = std::chrono::steady_clock::now();
  uint64_t updates_sent_ = 0;
  uint64_t bytes_sent_ = 0;
};

}  // namespace reckon::python

#endif  // RECKON_PYTHON_FLAT_PEER_H_
