// The model: a fully connected network of any depth and width, ReLU or
// sigmoid hidden units, softmax cross-entropy output. Its parameters are one
// flat vector in the order docs/wire.md §1 fixes: W1, b1, W2, b2, ..., each W of
// shape [out][in], row-major.
//
// Threads: a ModelShape is immutable once parsed, read from any thread; the
// functions keep no state. Errors: a shape or flag that cannot be is
// kInvalidArgument, naming it.
#ifndef RECKON_MODEL_MODEL_H_
#define RECKON_MODEL_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/codec.h"
#include "codec/fixed_point.h"

namespace reckon::model {

enum class Activation { kRelu, kSigmoid };

struct LayerLayout {
  int in = 0, out = 0;
  size_t weights = 0;  // offset of W (out x in) in the flat vector
  size_t bias = 0;     // offset of b (out)
};

class ModelShape {
 public:
  // `layers` like "784,512,512,10" (at least input and output), activation
  // "relu" or "sigmoid". kInvalidArgument naming the bad part; also when the
  // parameter count would reach 2^31 (docs/wire.md §1).
  static absl::StatusOr<ModelShape> Parse(const std::string& layers,
                                          const std::string& activation);

  const std::vector<int>& sizes() const { return sizes_; }
  Activation activation() const { return activation_; }
  const std::vector<LayerLayout>& layers() const { return layout_; }
  int inputs() const { return sizes_.front(); }
  int classes() const { return sizes_.back(); }
  uint64_t param_count() const { return param_count_; }
  // "784,512,512,10/relu": used in fingerprints, checkpoints and summaries.
  std::string ToString() const;
  // The flat vector as tensors for the quanta codecs: W (out x in) and b
  // (out x 1) per layer.
  codec::TensorLayout Layout() const;
  // Multiply-adds of one sample's forward pass (backward is twice that).
  uint64_t ForwardMacsPerSample() const;

 private:
  std::vector<int> sizes_;
  Activation activation_ = Activation::kRelu;
  std::vector<LayerLayout> layout_;
  uint64_t param_count_ = 0;
};

// Loss and accuracy of the model on a batch.
struct BatchStats {
  double loss_sum = 0;  // sum over the batch of -log p(label)
  int correct = 0;      // argmax == label
};

// The limit of layer `layer`'s uniform initial weights: sqrt(6 / fan_in)
// for ReLU (He); for sigmoid, Glorot's sqrt(6 / (fan_in + fan_out)), times
// four in hidden layers (Glorot and Bengio's factor for the logistic
// sigmoid), times one in the output layer.
double InitLimit(const ModelShape& shape, size_t layer);

// Sets every parameter from `seed` alone, on the replica's grid, with integer
// arithmetic only (codec::FixedPointReplica::InitializeUniform): weights
// uniform in +-InitLimit, biases zero. Every machine builds the same
// replica. REQUIRES: replica->param_count() == shape.param_count().
absl::Status InitializeModel(const ModelShape& shape, uint64_t seed,
                             codec::FixedPointReplica* replica);

// The replica every worker of a cluster starts from, as quanta: a new
// replica of `fraction_bits` initialized from `seed` (InitializeModel).
absl::StatusOr<std::vector<int64_t>> InitialWeights(const ModelShape& shape, int fraction_bits,
                                                    uint64_t seed);

}  // namespace reckon::model

#endif  // RECKON_MODEL_MODEL_H_
