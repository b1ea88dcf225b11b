#include "python/flat_peer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/codec.h"
#include "codec/update_message.h"
#if RECKON_HAVE_CUDA
#include "cuda/cuda_flat_replica.h"
#endif

namespace reckon::python {

namespace {

// The replica where the parameters are (FlatPeerOptions::device).
absl::StatusOr<std::unique_ptr<model::FlatReplica>> MakeReplica(uint64_t param_count,
                                                                int fraction_bits, int device) {
  if (device < 0) return model::MakeHostFlatReplica(param_count, fraction_bits);
#if RECKON_HAVE_CUDA
  return cuda::MakeCudaFlatReplica(param_count, fraction_bits, device);
#else
  return absl::FailedPreconditionError(
      absl::StrCat("parameters on CUDA device ", device,
                   ": this reckon was built without CUDA (no nvcc when it was built)"));
#endif
}

}  // namespace

absl::StatusOr<std::unique_ptr<FlatPeer>> FlatPeer::Create(FlatPeerOptions options,
                                                           std::span<const float> initial,
                                                           std::ostream& log) {
  const v1::ClusterFingerprint& fingerprint = options.peers.node.fingerprint;
  if (fingerprint.param_count() == 0 || initial.size() != fingerprint.param_count()) {
    return absl::InvalidArgumentError(absl::StrCat("initial parameters: ", initial.size(),
                                                   " for a fingerprint of ",
                                                   fingerprint.param_count()));
  }
  std::unique_ptr<FlatPeer> peer(new FlatPeer());
  const int fraction_bits = static_cast<int>(fingerprint.fraction_bits());
  RECKON_ASSIGN_OR_RETURN(peer->step_, codec::MakeThresholdStep(options.threshold, fraction_bits));
  RECKON_ASSIGN_OR_RETURN(peer->replica_,
                          MakeReplica(initial.size(), fraction_bits, options.device));
  // On the grid: every peer that starts from the same floats starts from
  // the same quanta.
  const double scale = std::ldexp(1.0, fraction_bits);
  std::vector<int64_t> quanta(initial.size());
  for (size_t i = 0; i < initial.size(); ++i) {
    if (!std::isfinite(initial[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("initial parameter ", i, " is ", initial[i], ": not finite"));
    }
    quanta[i] = std::llround(static_cast<double>(initial[i]) * scale);
  }
  RECKON_RETURN_IF_ERROR(peer->replica_->LoadWeights(quanta));
  if (!options.http_listen.empty()) {
    RECKON_ASSIGN_OR_RETURN(
        peer->observability_,
        worker::Observability::Start(options.http_listen, options.peers.node.node_id,
                                     /*ready_max_behind=*/1000));
    options.peers.metrics = &peer->observability_->metrics();
    peer->observability_->metrics().SetBuildInfo("flat", codec::CodecFlagName(options.wire_codec),
                                                 "framework");
    log << "reckon: HTTP on port " << peer->observability_->port()
        << " (/metrics /healthz /readyz /status)\n";
  }
  options.peers.stop = options.stop;
  RECKON_ASSIGN_OR_RETURN(peer->peers_,
                          worker::GossipPeers::Create(options.peers, quanta, fraction_bits, log));
  if (peer->observability_) peer->observability_->AttachNode(peer->peers_->node());
  worker::PublisherOptions publishing;
  publishing.node_id = options.peers.node.node_id;
  publishing.incarnation = options.peers.node.incarnation;
  publishing.param_count = initial.size();
  publishing.wire_codec = options.wire_codec;
  publishing.sink = [peers = peer->peers_.get()](v1::Update message,
                                                 const codec::DecodedUpdate& decoded) {
    return peers->Publish(std::move(message), decoded);
  };
  publishing.metrics = options.peers.metrics;
  peer->publisher_.emplace(std::move(publishing));
  // Joined from a snapshot: its weights (and what followed it) first.
  RECKON_RETURN_IF_ERROR(peer->peers_->BeforeStep(*peer->replica_, 0));
  peer->options_ = std::move(options);
  return peer;
}

FlatPeer::~FlatPeer() {
  // The endpoint lets go of the node before the node goes (peers_ leaves).
  if (observability_) observability_->DetachNode();
}

absl::Status FlatPeer::CheckCount(std::span<const float> params) const {
  if (params.size() != param_count()) {
    return absl::InvalidArgumentError(
        absl::StrCat(params.size(), " parameters given to a peer of ", param_count()));
  }
  return absl::OkStatus();
}

absl::Status FlatPeer::ReadInto(std::span<float> params) {
  RECKON_RETURN_IF_ERROR(CheckCount(params));
  return replica_->WriteInto(params);
}

absl::Status FlatPeer::SetThreshold(double threshold) {
  RECKON_ASSIGN_OR_RETURN(codec::ThresholdStep step,
                          codec::MakeThresholdStep(threshold, step_.fraction_bits));
  step_ = step;
  return absl::OkStatus();
}

absl::Status FlatPeer::Step(std::span<float> params, int samples, double loss_sum) {
  RECKON_RETURN_IF_ERROR(CheckCount(params));
  // All or nothing: a NaN or Inf leaves the residual as it was.
  RECKON_RETURN_IF_ERROR(replica_->Emit(params, step_, &words_));
  // On a GPU the replica applies the words from where its pass left them.
  RECKON_ASSIGN_OR_RETURN(const worker::Published sent,
                          publisher_->PublishThreshold(replica_.get(), words_, step_,
                                                       worker::WordsFrom::kLastEmission));
  updates_sent_ += sent.updates;
  bytes_sent_ += sent.wire_bytes;
  if (observability_) {
    // A step is the time from the last one: the framework's pass and ours.
    const auto now = std::chrono::steady_clock::now();
    observability_->metrics().OnStep(std::chrono::duration<double>(now - last_step_).count(),
                                     samples, loss_sum);
    last_step_ = now;
  }
  // The peers' messages accepted since the last step (and a re-join, a
  // replica check, backpressure: as a worker's step boundary).
  RECKON_RETURN_IF_ERROR(peers_->BeforeStep(*replica_, steps()));
  return ReadInto(params);
}

absl::Status FlatPeer::Finish(std::span<float> params, const std::atomic<bool>* stop) {
  RECKON_RETURN_IF_ERROR(CheckCount(params));
  RECKON_RETURN_IF_ERROR(
      peers_->Finish(*replica_, steps(), stop != nullptr ? stop : options_.stop));
  if (observability_) observability_->metrics().OnTrainingFinished();
  return ReadInto(params);
}

}  // namespace reckon::python
