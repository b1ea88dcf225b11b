// Runs an exported model (reckonctl evaluate and predict): the ONNX file
// itself, not the checkpoint it came from. An interpreter for the graphs
// reckonctl export writes and others made of the same operators on a batch
// of rows: Div, Sub, Mul and Add by a constant (a scalar or one value a
// column), Gemm (alpha = beta = 1, B a constant, transposed or not, C a
// constant row), Relu, Sigmoid, Softmax over the last axis. A file is
// hostile until checked: its size is capped, every node's operator,
// attributes and operand shapes are checked at load, and a refusal names the
// node and what is wrong.
//
// Threads: a loaded model is one thread's at a time. Errors: a missing file
// kNotFound, one that is not a model kDataLoss, one this runner refuses
// kInvalidArgument naming the node.
#ifndef RECKON_CTL_ONNX_RUNNER_H_
#define RECKON_CTL_ONNX_RUNNER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace onnx {
class NodeProto;
}  // namespace onnx

namespace reckon::ctl {

// The largest ONNX file Load reads (a protobuf message cannot be larger).
inline constexpr uint64_t kMaxOnnxBytes = uint64_t{2} << 30;

class OnnxRunner {
 public:
  // kNotFound for a missing file; kInvalidArgument, naming the node, for a
  // graph of other operators or shapes; kDataLoss for bytes that are not an
  // ONNX model.
  static absl::StatusOr<OnnxRunner> Load(const std::string& path);

  int64_t inputs() const { return inputs_; }
  int64_t outputs() const { return outputs_; }
  // How many rows one Run should take so that its buffers (rows x the
  // graph's widest value) stay under kMaxRunFloats: a file cannot make it
  // allocate from a width it invented. At most `wanted`, at least 1.
  static constexpr size_t kMaxRunFloats = size_t{1} << 26;  // 256 MiB
  size_t RowsAtOnce(size_t wanted) const;

  // The graph's output for `rows` rows of inputs() features each:
  // rows x outputs() values, row-major.
  std::vector<float> Run(const float* features, size_t rows) const;

 private:
  enum class Op { kDiv, kSub, kMul, kAdd, kGemm, kRelu, kSigmoid, kSoftmax };
  struct Step {
    Op op;
    std::string in, out;          // the running value's names
    const std::vector<float>* b;  // Div/Sub/Mul/Add: the constant; Gemm: B
    const std::vector<float>* c;  // Gemm: the bias row, or null
    int64_t width_in = 0, width_out = 0;
    bool trans_b = false;
  };
  // The step node `n` makes of the running value `running`, rows of
  // `width`: kInvalidArgument saying why it cannot.
  absl::StatusOr<Step> StepOf(const onnx::NodeProto& n, const std::string& running,
                              int64_t width) const;
  std::map<std::string, std::vector<float>> constants_;
  std::vector<Step> steps_;
  int64_t inputs_ = 0, outputs_ = 0;
  int64_t widest_ = 0;  // the widest value of the graph
};

}  // namespace reckon::ctl

#endif  // RECKON_CTL_ONNX_RUNNER_H_
