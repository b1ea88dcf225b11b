#include "ctl/onnx_runner.h"

#include <cblas.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/status_macros.h"

namespace reckon::ctl {

namespace {

// The largest constant or row width the runner takes: far beyond any model
// reckon trains (2^31 parameters in all), so a file cannot make it size a
// buffer from a number it invented.
constexpr int64_t kMaxElements = int64_t{1} << 31;

absl::StatusOr<std::vector<float>> ConstantOf(const onnx::TensorProto& t) {
  int64_t count = 1;
  for (const int64_t d : t.dims()) {
    if (d < 0 || d > kMaxElements || count * std::max<int64_t>(d, 1) > kMaxElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("constant '", t.name(), "' has a dimension ", d, " out of range"));
    }
    count *= d;
  }
  if (t.data_type() != onnx::TensorProto::FLOAT) {
    return absl::InvalidArgumentError(absl::StrCat("constant '", t.name(), "' is of type ",
                                                   onnx::TensorProto::DataType_Name(t.data_type()),
                                                   ": only FLOAT is run"));
  }
  std::vector<float> v;
  if (t.has_raw_data()) {
    if (t.raw_data().size() != size_t(count) * sizeof(float)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "constant '", t.name(), "' has ", t.raw_data().size(), " bytes for ", count, " floats"));
    }
    v.resize(size_t(count));
    std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
  } else {
    if (t.float_data_size() != count) {
      return absl::InvalidArgumentError(absl::StrCat("constant '", t.name(), "' has ",
                                                     t.float_data_size(), " floats for ", count));
    }
    v.assign(t.float_data().begin(), t.float_data().end());
  }
  return v;
}

// The [batch, width] of a graph input or output: width must be known.
absl::StatusOr<int64_t> RowWidth(const onnx::ValueInfoProto& v) {
  const auto& shape = v.type().tensor_type().shape();
  if (v.type().tensor_type().elem_type() != onnx::TensorProto::FLOAT || shape.dim_size() != 2 ||
      !shape.dim(1).has_dim_value() || shape.dim(1).dim_value() <= 0 ||
      shape.dim(1).dim_value() > kMaxElements) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph value '", v.name(), "' is not a float tensor [batch, width]"));
  }
  return shape.dim(1).dim_value();
}

float Attribute(const onnx::NodeProto& n, const std::string& name, float otherwise) {
  for (const onnx::AttributeProto& a : n.attribute()) {
    if (a.name() == name) return a.type() == onnx::AttributeProto::INT ? float(a.i()) : a.f();
  }
  return otherwise;
}

}  // namespace

absl::StatusOr<OnnxRunner::Step> OnnxRunner::StepOf(const onnx::NodeProto& n,
                                                    const std::string& running,
                                                    int64_t width) const {
  auto bad = [](const std::string& why) { return absl::InvalidArgumentError(why); };
  Step s{};
  s.in = running;
  s.width_in = width;
  s.width_out = width;
  if (n.output_size() != 1) return bad("not one output");
  s.out = n.output(0);
  const std::string& op = n.op_type();
  auto constant = [&](int i) -> const std::vector<float>* {
    if (i >= n.input_size()) return nullptr;
    auto it = constants_.find(n.input(i));
    return it == constants_.end() ? nullptr : &it->second;
  };
  if (op == "Relu" || op == "Sigmoid" || op == "Softmax") {
    if (n.input_size() != 1 || n.input(0) != running) return bad("does not take the rows");
    s.op = op == "Relu" ? Op::kRelu : op == "Sigmoid" ? Op::kSigmoid : Op::kSoftmax;
    const float axis = Attribute(n, "axis", -1);
    if (s.op == Op::kSoftmax && axis != -1 && axis != 1) return bad("only the last axis");
    return s;
  }
  if (op == "Div" || op == "Sub" || op == "Mul" || op == "Add") {
    const bool commutes = op == "Mul" || op == "Add";
    if (n.input_size() != 2) return bad("not two inputs");
    const int rows_at = n.input(0) == running ? 0 : (commutes && n.input(1) == running ? 1 : -1);
    s.b = rows_at < 0 ? nullptr : constant(1 - rows_at);
    if (s.b == nullptr) return bad("not the rows and a constant, in order");
    if (s.b->size() != 1 && int64_t(s.b->size()) != width) {
      return bad(absl::StrCat("a constant of ", s.b->size(), " for rows of ", width));
    }
    s.op = op == "Div" ? Op::kDiv : op == "Sub" ? Op::kSub : op == "Mul" ? Op::kMul : Op::kAdd;
    return s;
  }
  if (op != "Gemm")
    return bad("not run here (Div, Sub, Mul, Add, Gemm, Relu, Sigmoid, Softmax are)");
  if (n.input_size() < 2 || n.input(0) != running || (s.b = constant(1)) == nullptr) {
    return bad("not the rows times a constant");
  }
  if (Attribute(n, "alpha", 1) != 1 || Attribute(n, "beta", 1) != 1 ||
      Attribute(n, "transA", 0) != 0) {
    return bad("only alpha = beta = 1 and transA = 0");
  }
  s.op = Op::kGemm;
  s.trans_b = Attribute(n, "transB", 0) != 0;
  if (s.b->empty() || s.b->size() % size_t(width) != 0) {
    return bad(absl::StrCat("B of ", s.b->size(), " values for rows of ", width));
  }
  s.width_out = int64_t(s.b->size()) / width;
  s.c = constant(2);
  if (n.input_size() > 2 && (s.c == nullptr || int64_t(s.c->size()) != s.width_out)) {
    return bad(absl::StrCat("C is not a constant row of ", s.width_out));
  }
  return s;
}

absl::StatusOr<OnnxRunner> OnnxRunner::Load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  }
  RECKON_ASSIGN_OR_RETURN(const std::string bytes, base::ReadFile(path, kMaxOnnxBytes));
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat(path, " is not an ONNX model"));
  }
  const onnx::GraphProto& g = model.graph();
  OnnxRunner r;
  for (const onnx::TensorProto& t : g.initializer()) {
    absl::StatusOr<std::vector<float>> v = ConstantOf(t);
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", v.status().message()));
    r.constants_[t.name()] = *std::move(v);
  }
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const onnx::ValueInfoProto& v : g.input()) {
    if (!r.constants_.count(v.name())) inputs.push_back(&v);  // old files list constants too
  }
  if (inputs.size() != 1 || g.output_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the graph has ", inputs.size(),
                                                   " inputs and ", g.output_size(),
                                                   " outputs; one of each is run"));
  }
  RECKON_ASSIGN_OR_RETURN(r.inputs_, RowWidth(*inputs[0]));
  std::string running = inputs[0]->name();
  int64_t width = r.inputs_;
  r.widest_ = width;
  for (const onnx::NodeProto& n : g.node()) {
    absl::StatusOr<Step> s = r.StepOf(n, running, width);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": node '", n.name(), "' (", n.op_type(),
                                                     "): ", s.status().message()));
    }
    running = s->out;
    width = s->width_out;
    r.widest_ = std::max(r.widest_, width);
    r.steps_.push_back(*s);
  }
  RECKON_ASSIGN_OR_RETURN(r.outputs_, RowWidth(g.output(0)));
  if (running != g.output(0).name() || width != r.outputs_) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the last node does not make the graph's output '", g.output(0).name(), "'"));
  }
  return r;
}

size_t OnnxRunner::RowsAtOnce(size_t wanted) const {
  const size_t fit = kMaxRunFloats / size_t(std::max<int64_t>(widest_, 1));
  return std::max<size_t>(1, std::min(wanted, fit));
}

std::vector<float> OnnxRunner::Run(const float* features, size_t rows) const {
  std::vector<float> x(features, features + rows * size_t(inputs_)), y;
  for (const Step& s : steps_) {
    const size_t w = size_t(s.width_in);
    switch (s.op) {
      case Op::kDiv:
      case Op::kSub:
      case Op::kMul:
      case Op::kAdd: {
        const std::vector<float>& b = *s.b;
        const bool scalar = b.size() == 1;
        for (size_t i = 0; i < rows; ++i) {
          float* row = &x[i * w];
          for (size_t j = 0; j < w; ++j) {
            const float c = b[scalar ? 0 : j];
            row[j] = s.op == Op::kDiv   ? row[j] / c
                     : s.op == Op::kSub ? row[j] - c
                     : s.op == Op::kMul ? row[j] * c
                                        : row[j] + c;
          }
        }
        break;
      }
      case Op::kGemm: {
        const size_t n = size_t(s.width_out);
        y.assign(rows * n, 0.0f);
        if (s.c != nullptr) {
          for (size_t i = 0; i < rows; ++i) std::copy(s.c->begin(), s.c->end(), &y[i * n]);
        }
        if (rows > 0) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, int(rows),
                      int(n), int(w), 1.0f, x.data(), int(w), s.b->data(),
                      s.trans_b ? int(w) : int(n), s.c != nullptr ? 1.0f : 0.0f, y.data(), int(n));
        }
        x.swap(y);
        break;
      }
      case Op::kRelu:
        for (float& v : x) v = v > 0 ? v : 0.0f;
        break;
      case Op::kSigmoid:
        for (float& v : x) v = 1.0f / (1.0f + std::exp(-v));
        break;
      case Op::kSoftmax:
        for (size_t i = 0; i < rows; ++i) {
          float* row = &x[i * w];
          const float top = *std::max_element(row, row + w);
          float sum = 0;
          for (size_t j = 0; j < w; ++j) sum += (row[j] = std::exp(row[j] - top));
          for (size_t j = 0; j < w; ++j) row[j] /= sum;
        }
        break;
    }
  }
  return x;
}

}  // namespace reckon::ctl
