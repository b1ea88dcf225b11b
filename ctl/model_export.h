// A trained network as other tools take it (reckonctl export): float32
// weights and biases per layer, the activation, and the input
// standardization the weights were trained behind, so that raw features go
// in. As ONNX, built and checked with the ONNX library (Debian's
// libonnx-dev), and as numpy's .npz.
//
// Threads: functions, the calling thread. Errors: a peer that does not
// answer kUnavailable, one that refuses kPermissionDenied, weights that do
// not match their checksum kDataLoss, an export the model cannot make
// kFailedPrecondition; each named.
#ifndef RECKON_CTL_MODEL_EXPORT_H_
#define RECKON_CTL_MODEL_EXPORT_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "server/tls.h"
#include "worker/dataset.h"

namespace reckon::ctl {

struct ExportedModel {
  model::ModelShape shape;
  // The flat parameter vector (docs/wire.md §1: W1 [out][in] row-major, b1,
  // W2, ...) as the model computes with it: each weight's quanta as float32.
  std::vector<float> params;
  worker::InputTransform input;
  std::string weight_hash;  // of the fixed-point weights
  std::string source;       // where it came from, for the exported file's metadata
};

// The model a checkpoint holds. kDataLoss for a file that is not a whole
// checkpoint or whose weights do not match their hash or shape;
// kFailedPrecondition for one written before the standardization was kept
// in checkpoints (2026-11-27): without it raw features cannot go in.
absl::StatusOr<ExportedModel> ModelFromCheckpoint(const std::string& path);

// The model a worker of a running cluster holds (reckonctl export --peer):
// its replica at a version vector it names (in `source`), and the
// standardization its worker trains behind, by a Snapshot call made for an
// export (SnapshotRequest.for_export: the cluster token, or a certificate
// of its CA). kUnavailable when unreachable or still joining;
// kPermissionDenied without the token; kDataLoss for an answer that is not
// a model or not its hash; kFailedPrecondition for a peer without a
// standardization (a --synthetic member).
inline constexpr uint64_t kMaxExportParams = uint64_t{1} << 31;  // 16 GiB of quanta
absl::StatusOr<ExportedModel> ModelFromPeer(const std::string& address,
                                            const server::TlsConfig& tls,
                                            const std::string& cluster_token,
                                            std::chrono::milliseconds timeout);

// An ONNX model (opset kOnnxOpset): input "features" [batch, inputs] of raw
// float32 features, output "probabilities" [batch, classes]; Div, Sub and
// Mul for the standardization, one Gemm per layer, Relu or Sigmoid between,
// Softmax last. Checked by onnx::checker before it is returned.
inline constexpr int kOnnxOpset = 17;
absl::StatusOr<std::string> OnnxBytes(const ExportedModel& m);

// A .npz: layers (int64 widths), activation (a string), W1, b1, W2, b2, ...
// (float32, W of shape [out, in]), input_divisor, input_mean,
// input_inv_stddev (float32: x = (raw / divisor - mean) * inv_stddev), and
// weight_hash.
absl::StatusOr<std::string> NpzBytes(const ExportedModel& m);

}  // namespace reckon::ctl

#endif  // RECKON_CTL_MODEL_EXPORT_H_
