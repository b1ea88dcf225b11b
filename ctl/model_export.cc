#include "ctl/model_export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/zip_writer.h"
#include "codec/fixed_point.h"
#include "server/grpc_clients.h"
#include "server/version_vector.h"
#include "worker/checkpoint.h"
#include "worker/npy.h"

namespace reckon::ctl {

namespace {

std::string FloatBytes(const float* data, size_t count) {
  static_assert(std::endian::native == std::endian::little, "ONNX raw_data and .npy are LE");
  return std::string(reinterpret_cast<const char*>(data), count * sizeof(float));
}

const char* ActivationName(model::Activation a) {
  return a == model::Activation::kRelu ? "relu" : "sigmoid";
}

}  // namespace

namespace {

// The model `weights` (quanta with `fraction_bits`) of `model_name`
// ("LAYERS/ACT") make behind `input`; `where` names the file or the peer in
// refusals (kDataLoss: not a model, other sizes; kFailedPrecondition: no
// standardization).
absl::StatusOr<ExportedModel> ModelOf(const std::string& where, const std::string& model_name,
                                      int fraction_bits, std::span<const int64_t> weights,
                                      worker::InputTransform input, std::string weight_hash,
                                      std::string source, const std::string& no_input_why) {
  const size_t slash = model_name.rfind('/');
  if (slash == std::string::npos) {
    return absl::DataLossError(absl::StrCat(where, ": model '", model_name, "' is not LAYERS/ACT"));
  }
  absl::StatusOr<model::ModelShape> shape =
      model::ModelShape::Parse(model_name.substr(0, slash), model_name.substr(slash + 1));
  if (!shape.ok()) {
    return absl::DataLossError(
        absl::StrCat(where, ": model '", model_name, "': ", shape.status().message()));
  }
  if (weights.size() != shape->param_count()) {
    return absl::DataLossError(absl::StrCat(where, ": ", weights.size(), " weights for a model of ",
                                            shape->param_count()));
  }
  if (fraction_bits < 0 || fraction_bits > codec::kMaxFractionBits) {
    return absl::DataLossError(absl::StrCat(where, ": fraction bits ", fraction_bits));
  }
  if (codec::WeightHashOf(weights) != weight_hash) {
    return absl::DataLossError(
        absl::StrCat(where, ": the weights do not match their recorded hash ", weight_hash));
  }
  if (input.mean.empty()) return absl::FailedPreconditionError(absl::StrCat(where, no_input_why));
  if (input.mean.size() != size_t(shape->inputs()) ||
      input.inv_stddev.size() != input.mean.size()) {
    return absl::DataLossError(absl::StrCat(where, ": standardization of ", input.mean.size(),
                                            " features for a model of ", shape->inputs(),
                                            " inputs"));
  }
  ExportedModel m{
      *std::move(shape), {}, std::move(input), std::move(weight_hash), std::move(source)};
  const double quantum = std::ldexp(1.0, -fraction_bits);
  m.params.resize(weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    m.params[i] = codec::QuantaToFloat(weights[i], quantum);
  }
  return m;
}

}  // namespace

absl::StatusOr<ExportedModel> ModelFromCheckpoint(const std::string& path) {
  RECKON_ASSIGN_OR_RETURN(worker::StoredCheckpoint stored, worker::LoadCheckpoint(path));
  const v1::Checkpoint& h = stored.header;
  return ModelOf(path, h.model(), h.fraction_bits(), stored.weights, worker::InputTransformOf(h),
                 h.weight_hash(), absl::StrCat("checkpoint ", path, " (step ", h.steps_done(), ")"),
                 " holds no input standardization (checkpoints before 2026-11-27 did not): an "
                 "export of it would not take raw features. Resume it for a step with this "
                 "version to write one that does");
}

absl::StatusOr<ExportedModel> ModelFromPeer(const std::string& address,
                                            const server::TlsConfig& tls,
                                            const std::string& cluster_token,
                                            std::chrono::milliseconds timeout) {
  v1::SnapshotRequest request;
  request.set_for_export(true);
  request.set_cluster_token(cluster_token);
  request.mutable_requester()->set_node_id("reckonctl");
  request.set_header_only(true);
  // The header first: the model's size, before the weights are asked for.
  RECKON_ASSIGN_OR_RETURN(const server::FetchedSnapshot probe,
                          server::FetchSnapshot(address, request, 0, timeout, tls));
  const v1::SnapshotChunk::Header& first = probe.header;
  if (first.joining()) {
    return absl::UnavailableError(
        absl::StrCat(address, " is still joining its cluster: it holds no model yet"));
  }
  if (first.param_count() > kMaxExportParams) {
    return absl::DataLossError(absl::StrCat(address, ": ", first.param_count(),
                                            " parameters, over the ", kMaxExportParams,
                                            " an export takes"));
  }
  request.set_header_only(false);
  RECKON_ASSIGN_OR_RETURN(
      const server::FetchedSnapshot snapshot,
      server::FetchSnapshot(address, request, first.param_count(), timeout, tls));
  const v1::SnapshotChunk::Header& h = snapshot.header;
  if (h.fingerprint().model() != first.fingerprint().model()) {
    return absl::DataLossError(absl::StrCat(address, ": the model changed between two answers ('",
                                            first.fingerprint().model(), "', then '",
                                            h.fingerprint().model(), "')"));
  }
  worker::InputTransform input;
  input.divisor = h.input().divisor();
  input.mean.assign(h.input().mean().begin(), h.input().mean().end());
  input.inv_stddev.assign(h.input().inv_stddev().begin(), h.input().inv_stddev().end());
  return ModelOf(address, h.fingerprint().model(), h.fingerprint().fraction_bits(),
                 snapshot.weights, std::move(input), h.weights_sha256(),
                 absl::StrCat("peer ", address, " (", h.source_node_id().substr(0, 64),
                              ") at version vector ", server::VersionJson(snapshot.applied)),
                 " serves no input standardization (a --synthetic member, or a worker that has "
                 "not read its data yet): export another worker, or its checkpoint");
}

absl::StatusOr<std::string> OnnxBytes(const ExportedModel& m) {
  onnx::ModelProto model;
  model.set_ir_version(onnx::IR_VERSION);
  model.set_producer_name("reckon");
  model.set_doc_string(absl::StrCat("reckon ", m.shape.ToString(), " from ", m.source,
                                    "; raw features in, class probabilities out"));
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  auto meta = [&](const std::string& key, const std::string& value) {
    onnx::StringStringEntryProto* p = model.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  };
  meta("reckon_model", m.shape.ToString());
  meta("reckon_weight_hash", m.weight_hash);
  meta("reckon_source", m.source);

  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("reckon_mlp");
  auto value_info = [](onnx::ValueInfoProto* v, const std::string& name, int64_t width) {
    v->set_name(name);
    onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param("batch");
    t->mutable_shape()->add_dim()->set_dim_value(width);
  };
  value_info(g->add_input(), "features", m.shape.inputs());
  value_info(g->add_output(), "probabilities", m.shape.classes());
  auto constant = [&](const std::string& name, std::vector<int64_t> dims, const float* data,
                      size_t count) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (const int64_t d : dims) t->add_dims(d);
    t->set_raw_data(FloatBytes(data, count));
  };
  auto node = [&](const std::string& op, std::vector<std::string> inputs,
                  const std::string& output) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(output);
    for (const std::string& in : inputs) n->add_input(in);
    n->add_output(output);
    return n;
  };
  auto int_attribute = [](onnx::NodeProto* n, const std::string& name, int64_t value) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  };
  // The standardization, in the order and precision the worker applies it.
  const int64_t inputs = m.shape.inputs();
  constant("input_divisor", {}, &m.input.divisor, 1);
  constant("input_mean", {inputs}, m.input.mean.data(), m.input.mean.size());
  constant("input_inv_stddev", {inputs}, m.input.inv_stddev.data(), m.input.inv_stddev.size());
  node("Div", {"features", "input_divisor"}, "scaled");
  node("Sub", {"scaled", "input_mean"}, "centered");
  node("Mul", {"centered", "input_inv_stddev"}, "x0");
  const auto& layers = m.shape.layers();
  std::string x = "x0";
  for (size_t k = 0; k < layers.size(); ++k) {
    const model::LayerLayout& l = layers[k];
    const std::string w = absl::StrCat("W", k + 1), b = absl::StrCat("b", k + 1);
    constant(w, {l.out, l.in}, m.params.data() + l.weights, size_t(l.out) * l.in);
    constant(b, {l.out}, m.params.data() + l.bias, size_t(l.out));
    const std::string z = absl::StrCat("z", k + 1);
    int_attribute(node("Gemm", {x, w, b}, z), "transB", 1);
    if (k + 1 < layers.size()) {
      x = absl::StrCat("h", k + 1);
      node(m.shape.activation() == model::Activation::kRelu ? "Relu" : "Sigmoid", {z}, x);
    } else {
      int_attribute(node("Softmax", {z}, "probabilities"), "axis", 1);
    }
  }
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the ONNX checker refused the model: ", e.what()));
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    return absl::InternalError(
        absl::StrCat("the ONNX model does not serialize (", model.ByteSizeLong(), " bytes)"));
  }
  return bytes;
}

absl::StatusOr<std::string> NpzBytes(const ExportedModel& m) {
  using worker::NpyBytes;
  using worker::NpyType;
  std::vector<std::pair<std::string, std::string>> entries;
  auto floats = [&](const std::string& name, std::vector<uint64_t> shape, const float* data,
                    size_t count) {
    entries.emplace_back(name + ".npy",
                         NpyBytes(NpyType::kFloat32, shape, FloatBytes(data, count)));
  };
  // numpy's fixed-width unicode: four little-endian bytes a character.
  auto text = [&](const std::string& name, const std::string& ascii) {
    std::string utf32;
    for (const char c : ascii) utf32 += std::string{c, '\0', '\0', '\0'};
    entries.emplace_back(name + ".npy",
                         worker::NpyBytesOfDescr(absl::StrCat("<U", ascii.size()), {}, utf32));
  };
  std::vector<int64_t> widths(m.shape.sizes().begin(), m.shape.sizes().end());
  entries.emplace_back(
      "layers.npy",
      NpyBytes(NpyType::kInt64, {widths.size()},
               std::string_view(reinterpret_cast<const char*>(widths.data()), 8 * widths.size())));
  text("activation", ActivationName(m.shape.activation()));
  for (size_t k = 0; k < m.shape.layers().size(); ++k) {
    const model::LayerLayout& l = m.shape.layers()[k];
    floats(absl::StrCat("W", k + 1), {uint64_t(l.out), uint64_t(l.in)}, m.params.data() + l.weights,
           size_t(l.out) * l.in);
    floats(absl::StrCat("b", k + 1), {uint64_t(l.out)}, m.params.data() + l.bias, size_t(l.out));
  }
  floats("input_divisor", {}, &m.input.divisor, 1);
  floats("input_mean", {m.input.mean.size()}, m.input.mean.data(), m.input.mean.size());
  floats("input_inv_stddev", {m.input.inv_stddev.size()}, m.input.inv_stddev.data(),
         m.input.inv_stddev.size());
  text("weight_hash", m.weight_hash);
  return base::StoredZip(entries);
}

}  // namespace reckon::ctl
