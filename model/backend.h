// The training backend: where the model's numbers live and the step runs.
// One interface, same-shaped backends (cpu now, cuda next); the training loop
// (trainer.h) never changes between them.
//
// Ownership: the backend owns the replica (int64 quanta and their float32
// copy), the residual, the optimizer state and all scratch memory; on the
// GPU these live in device memory and only batches, emitted updates and
// evaluation results cross to the host. Batches are given as host pointers
// that must stay valid for the duration of the call.
//
// Threading: not thread-safe; one thread (the training loop) calls it. Calls
// are synchronous as seen by the caller: outputs are ready on return (a CUDA
// backend syncs its stream before returning them), except for the step
// taken in halves (StageBatch, LaunchTrainStep, FinishTrainStep), which lets
// the caller prepare the next batch while the device computes this one.
#ifndef RECKON_MODEL_BACKEND_H_
#define RECKON_MODEL_BACKEND_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "codec/fixed_point.h"
#include "codec/weight_checksum.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "model/replica.h"

namespace reckon::model {

enum class UpdateMode {
  kCodec,      // a quanta codec (codec/codec.h: dense, onebit, dyntree8) with error feedback
  kThreshold,  // Strom: apply only the +-tau steps
};

enum class GemmPrecision { kFp32, kTf32 };
inline absl::StatusOr<GemmPrecision> ParseGemmPrecision(std::string_view name) {
  if (name == "fp32") return GemmPrecision::kFp32;
  if (name == "tf32") return GemmPrecision::kTf32;
  return absl::InvalidArgumentError(
      absl::StrCat("--gemm-precision '", std::string(name), "' is none of fp32, tf32"));
}
inline std::string GemmPrecisionName(GemmPrecision precision) {
  return precision == GemmPrecision::kTf32 ? "tf32" : "fp32";
}

struct BackendConfig {
  ModelShape shape;
  OptimizerConfig optimizer;
  UpdateMode mode = UpdateMode::kThreshold;
  int fraction_bits = codec::kDefaultFractionBits;
  codec::ThresholdStep step;  // kThreshold only
  codec::CodecOptions codec;  // kCodec only (its fraction_bits and layout are filled in)
  int max_batch = 100;        // largest training batch
  int threads = 0;            // CPU threads; 0 = all cores
  // The GEMMs' arithmetic (--gemm-precision): kFp32 everywhere; kTf32 the
  // CUDA backend's tensor cores, 10 bits of mantissa in the products (the
  // CPU backend refuses it).
  GemmPrecision gemm_precision = GemmPrecision::kFp32;
};

// config.codec with the model's tensor layout and the replica's fraction
// bits filled in: what a backend builds its codec from.
inline codec::CodecOptions FilledCodecOptions(const BackendConfig& config) {
  codec::CodecOptions options = config.codec;
  options.layout = config.shape.Layout();
  options.fraction_bits = config.fraction_bits;
  return options;
}

// Every label in [0, classes): the loss reads each sample's label's score,
// so a backend checks a batch's labels before it computes. The refusal
// names the first bad sample.
inline absl::Status CheckLabels(std::span<const int32_t> labels, int classes) {
  for (size_t r = 0; r < labels.size(); ++r) {
    if (labels[r] < 0 || labels[r] >= classes) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", labels[r], " of sample ", r, " outside [0, ", classes, ")"));
    }
  }
  return absl::OkStatus();
}

// What one step emits, to be sent to peers and applied locally.
struct Emission {
  std::vector<uint32_t> words;  // kThreshold: +-step updates, ascending
  std::vector<int64_t> dense;   // kCodec, onebit and dyntree8: the decoded quanta (param_count)
  v1::Update encoded;           // kCodec: the message's codec fields and payload
  // kCodec: the decoded form, `dense` or (dense fp32) the payload itself
  // (codec::EmittedQuanta); a view of this emission.
  codec::QuantaSpan quanta() const { return codec::EmittedQuanta(encoded, dense); }
};

// A replica that trains: the cluster's replica (replica.h: load, read,
// hash, apply), the residual and the optimizer's state beside it, and the
// step.
class Backend : public Replica {
 public:
  // Residual and optimizer state, for checkpoints (param_count floats each;
  // the state is empty for plain SGD).
  virtual absl::StatusOr<std::vector<float>> ReadResidual() const = 0;
  virtual absl::StatusOr<std::vector<float>> ReadOptimizerState() const = 0;
  virtual absl::Status LoadTrainingState(std::span<const float> residual,
                                         std::span<const float> optimizer_state) = 0;
  // The quanta codec's state between steps (codec::CodecState: dyntree8's
  // scales and step count), for checkpoints; empty in threshold mode and
  // for codecs that keep none. LoadCodecState: kInvalidArgument, naming
  // what is wrong, for state the codec cannot have had.
  virtual absl::StatusOr<codec::CodecState> ReadCodecState() const { return codec::CodecState{}; }
  virtual absl::Status LoadCodecState(const codec::CodecState& state) {
    if (state == codec::CodecState{}) return absl::OkStatus();
    return absl::InvalidArgumentError("this backend keeps no codec state");
  }

  // One step on `batch` samples: forward, backward, optimizer delta into the
  // residual, then the mode's emission into `*out`, which the residual no
  // longer holds. Does not change the replica: the caller applies the
  // emission (ApplyUpdates / ApplyDense), locally and on every peer alike.
  // kInvalidArgument when the residual holds NaN or Inf (nothing emitted).
  virtual absl::StatusOr<BatchStats> TrainStep(const float* images, const int32_t* labels,
                                               int batch, float learning_rate, Emission* out) = 0;

  // The step taken in halves, so that the host works while the device
  // computes (Seide 2014's double buffering: the next minibatch's copy
  // overlaps this one's compute):
  //   StageBatch(batch k); LaunchTrainStep(...); [StageBatch(batch k + 1);
  //   host work] FinishTrainStep(...)
  // is TrainStep on batch k, bit for bit. A batch is labels.size() samples
  // of images.size() / labels.size() features each (the backend refuses any
  // other count than its model's inputs). StageBatch reads the batch before
  // it returns (the caller may refill its memory at once) and sends it on
  // toward the device (the CUDA backend: pinned memory, then a copy stream,
  // into the other of two input buffers); a bad label is refused there,
  // naming the sample, and leaves no batch staged. LaunchTrainStep takes
  // the last staged batch (kFailedPrecondition when none is) and starts the
  // step; `*out` must outlive FinishTrainStep, which waits for the step and
  // returns what TrainStep would. Between the two halves only StageBatch
  // may be called. These defaults take the whole step in LaunchTrainStep
  // (through TrainStep, so a ForwardingBackend's TrainStep still sees it).
  virtual absl::Status StageBatch(std::span<const float> images, std::span<const int32_t> labels);
  virtual absl::Status LaunchTrainStep(float learning_rate, Emission* out);
  virtual absl::StatusOr<BatchStats> FinishTrainStep();

  // A step whose emission is applied to this replica and nowhere else (the
  // layer-wise pre-training), in the quanta-codec mode (kCodec; REQUIRES
  // it): the same as TrainStep into `*scratch` and then ApplyDense of its
  // quanta, which is what this default does. The CUDA backend keeps the
  // dense fp32 codec's step on the device (the residual need not cross to
  // the host and back every step), leaving `*scratch` empty.
  virtual absl::StatusOr<BatchStats> TrainStepLocally(const float* images, const int32_t* labels,
                                                      int batch, float learning_rate,
                                                      Emission* scratch) {
    absl::StatusOr<BatchStats> stats = TrainStep(images, labels, batch, learning_rate, scratch);
    if (!stats.ok()) return stats;
    if (!scratch->words.empty()) {
      return absl::FailedPreconditionError(
          "TrainStepLocally is for the quanta codecs' mode; a threshold step's words need its "
          "step_quanta (ApplyUpdates)");
    }
    if (absl::Status applied = ApplyDense(scratch->quanta()); !applied.ok()) return applied;
    return stats;
  }

  // Changes the momentum coefficient (--optimizer momentum) for the
  // following steps; the velocity is kept.
  virtual void SetMomentum(double momentum) = 0;

  // Changes tau for the following steps (the density controller steers it).
  virtual void SetThresholdStep(const codec::ThresholdStep& step) = 0;

  // Loss and accuracy of the current replica on `count` samples.
  virtual absl::StatusOr<BatchStats> Evaluate(const float* images, const int32_t* labels,
                                              size_t count) = 0;

 private:
  // The defaults of the step in halves: the staged batch (a copy), and the
  // launched step's result until FinishTrainStep hands it out.
  std::vector<float> staged_images_;
  std::vector<int32_t> staged_labels_;
  int staged_rows_ = 0;
  bool launched_ = false;
  absl::StatusOr<BatchStats> launched_result_;
};

}  // namespace reckon::model

#endif  // RECKON_MODEL_BACKEND_H_
