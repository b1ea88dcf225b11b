#include "model/model.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "codec/update_words.h"

namespace reckon::model {

absl::StatusOr<ModelShape> ModelShape::Parse(const std::string& layers,
                                             const std::string& activation) {
  ModelShape shape;
  for (const absl::string_view part : absl::StrSplit(layers, ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > (1 << 24)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--layers '", layers, "': '", part, "' is not a layer width in [1, 2^24]"));
    }
    shape.sizes_.push_back(n);
  }
  if (shape.sizes_.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layers '", layers, "' needs at least an input and an output width"));
  }
  if (shape.sizes_.back() < 2) {
    return absl::InvalidArgumentError("the output layer needs at least 2 classes");
  }
  if (activation == "relu") {
    shape.activation_ = Activation::kRelu;
  } else if (activation == "sigmoid") {
    shape.activation_ = Activation::kSigmoid;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--activation '", activation, "' is not relu or sigmoid"));
  }
  uint64_t offset = 0;
  for (size_t l = 1; l < shape.sizes_.size(); ++l) {
    LayerLayout layer;
    layer.in = shape.sizes_[l - 1];
    layer.out = shape.sizes_[l];
    layer.weights = offset;
    offset += uint64_t(layer.in) * uint64_t(layer.out);
    layer.bias = offset;
    offset += uint64_t(layer.out);
    if (offset >= codec::kMaxParamCount) {
      return absl::InvalidArgumentError(
          absl::StrCat("--layers '", layers, "' has 2^31 or more parameters (docs/wire.md §1)"));
    }
    shape.layout_.push_back(layer);
  }
  shape.param_count_ = offset;
  return shape;
}

std::string ModelShape::ToString() const {
  return absl::StrCat(absl::StrJoin(sizes_, ","), "/",
                      activation_ == Activation::kRelu ? "relu" : "sigmoid");
}

codec::TensorLayout ModelShape::Layout() const {
  codec::TensorLayout layout;
  for (const LayerLayout& l : layout_) {
    layout.push_back({static_cast<uint32_t>(l.out), static_cast<uint32_t>(l.in)});
    layout.push_back({static_cast<uint32_t>(l.out), 1});
  }
  return layout;
}

uint64_t ModelShape::ForwardMacsPerSample() const {
  uint64_t macs = 0;
  for (const LayerLayout& l : layout_) macs += uint64_t(l.in) * uint64_t(l.out);
  return macs;
}

double InitLimit(const ModelShape& shape, size_t layer) {
  const LayerLayout& l = shape.layers()[layer];
  if (shape.activation() == Activation::kRelu) return std::sqrt(6.0 / l.in);
  const double glorot = std::sqrt(6.0 / (double(l.in) + l.out));
  // A sigmoid's slope is at most 1/4 (tanh's is 1): four times the limit
  // keeps the signal's and the gradient's variance from shrinking layer by
  // layer (Glorot and Bengio 2010). With plain Glorot limits a network of
  // five sigmoid layers of 256 learned nothing in two epochs (10.00%); with
  // these, 84.35% (docs/training.md). The output layer feeds the softmax.
  const bool hidden = layer + 1 < shape.layers().size();
  return hidden ? 4 * glorot : glorot;
}

absl::Status InitializeModel(const ModelShape& shape, uint64_t seed,
                             codec::FixedPointReplica* replica) {
  if (replica->param_count() != shape.param_count()) {
    return absl::InvalidArgumentError(absl::StrCat("replica has ", replica->param_count(),
                                                   " parameters, model ", shape.ToString(),
                                                   " has ", shape.param_count()));
  }
  for (size_t l = 0; l < shape.layers().size(); ++l) {
    const LayerLayout& layer = shape.layers()[l];
    // sqrt is correctly rounded by IEEE 754: the same limit everywhere.
    const double limit = InitLimit(shape, l);
    absl::Status s = replica->InitializeUniform(seed, /*stream=*/l, layer.weights,
                                                uint64_t(layer.in) * layer.out, limit);
    if (!s.ok()) return s;
    s = replica->InitializeUniform(seed, l, layer.bias, layer.out, /*limit=*/0.0);  // zeros
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> InitialWeights(const ModelShape& shape, int fraction_bits,
                                                    uint64_t seed) {
  RECKON_ASSIGN_OR_RETURN(codec::FixedPointReplica replica,
                          codec::FixedPointReplica::Create(shape.param_count(), fraction_bits));
  RECKON_RETURN_IF_ERROR(InitializeModel(shape, seed, &replica));
  return std::vector<int64_t>(replica.quanta().begin(), replica.quanta().end());
}

}  // namespace reckon::model
