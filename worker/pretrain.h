// Supervised layer-wise pre-training (Strom 2015 section 3.3, after Seide,
// Li, Chen and Yu 2011, "discriminative pre-training"): a deep network is
// grown one hidden layer at a time, each stage trained by back-propagation
// for one short pass over a small subset, before the real training starts.
//
// Stage k (k = 1 .. hidden layers) is the network of the model's first k
// hidden layers under a fresh output layer: layers 1 .. k-1 as the previous
// stage left them, layer k and the output layer as the seed initializes them
// (model::InitialWeights of the stage's shape). The flat layout (model.h)
// makes the hidden layers of one stage a prefix of the next stage's vector,
// so a stage's result is carried over by copying that prefix. The last stage
// is the whole model; its result is what the training starts from.
//
// One worker computes it, on its own backend, locally: nothing is sent. In a
// cluster the trainer then publishes the result as one dense Update from the
// seed's replica, which every member applies (docs/training.md "Pre-training
// in a cluster"): float32 GEMMs on different machines, thread counts or
// backends do not give identical bits, so the workers could not each compute
// it and agree.
#ifndef RECKON_WORKER_PRETRAIN_H_
#define RECKON_WORKER_PRETRAIN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/backend.h"
#include "worker/dataset.h"
#include "worker/samples.h"

namespace reckon::worker {

struct PretrainOptions {
  // The full model's configuration: shape, optimizer (kind, momentum,
  // learning rate, --warmup-steps, weight decay), fraction bits, threads.
  // Each stage trains a copy with its own shape, dense (nothing is
  // thresholded: the pass is local) and a fresh optimizer state.
  model::BackendConfig config;
  std::string backend = "auto";  // as --backend
  uint64_t seed = 1;             // initializes each stage's fresh layers
  int batch = 100;               // minibatch of every stage
  float learning_rate = 0.1f;    // at `batch`, before --warmup-steps' ramp in each stage
  // Set (SIGTERM): stop before the next step with kCancelled (null: never).
  const std::atomic<bool>* stop = nullptr;
  // Test only: wraps each stage's backend (TrainerOptions::wrap_backend).
  std::function<std::unique_ptr<model::Backend>(std::unique_ptr<model::Backend>)> wrap_backend;
};

// Pre-trains on `samples` (indices into `train`, in the order they are
// used; each stage makes one pass over all of them) and returns the full
// model's replica as quanta. Logs one line per stage (its mean loss and
// training accuracy). kInvalidArgument when the model has no hidden layer
// or `samples` holds less than one batch; a stage whose residual diverges
// (NaN) is an error naming the stage; the stop flag set is kCancelled
// naming the stage.
absl::StatusOr<std::vector<int64_t>> PretrainLayerwise(const PretrainOptions& options,
                                                       const Samples& train,
                                                       std::span<const uint32_t> samples,
                                                       std::ostream& log);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_PRETRAIN_H_
