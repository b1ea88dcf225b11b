#include "model/flat_replica.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/quantizer.h"
#include "codec/update_message.h"

namespace reckon::model {
namespace {

class HostFlatReplica final : public FlatReplica {
 public:
  explicit HostFlatReplica(codec::FixedPointReplica replica)
      : replica_(std::move(replica)), residual_(replica_.param_count(), 0.0f) {}

  std::string Describe() const override { return "flat (a framework's parameters, host memory)"; }
  uint64_t param_count() const override { return replica_.param_count(); }

  absl::Status Emit(std::span<const float> params, const codec::ThresholdStep& step,
                    std::vector<uint32_t>* words) override {
    // Checked before the residual takes anything: all or nothing.
    if (const size_t bad = codec::FirstNonFinite(params); bad < params.size()) {
      return NonFiniteParameterError(bad, params[bad]);
    }
    // The add and Strom's threshold in one pass (profiled: the peer's cost
    // is the memory it streams, docs/pytorch.md "What a step costs").
    return codec::AddDifferenceAndQuantize(residual_, params, replica_.weights(), step, words);
  }
  absl::Status WriteInto(std::span<float> params) override {
    const std::span<const float> replica = replica_.weights();
    std::copy(replica.begin(), replica.end(), params.begin());
    return absl::OkStatus();
  }
  absl::Status OrderAfter(uintptr_t) override { return absl::OkStatus(); }

  absl::Status LoadWeights(std::span<const int64_t> quanta) override {
    return replica_.Load(quanta);
  }
  absl::StatusOr<std::vector<int64_t>> ReadWeights() const override {
    return std::vector<int64_t>(replica_.quanta().begin(), replica_.quanta().end());
  }
  absl::StatusOr<std::string> WeightHash() const override { return replica_.WeightHash(); }
  uint64_t WeightsWrapped() const override { return replica_.wrapped(); }
  absl::Status ApplyUpdates(int64_t step_quanta, std::span<const uint32_t> words) override {
    return replica_.Apply(step_quanta, words);
  }
  absl::Status ApplyDense(codec::QuantaSpan quanta) override { return replica_.ApplyDense(quanta); }
  absl::Status ApplyCheckedDense(const v1::Update& msg) override {
    return codec::CheckAndApplyDenseUpdate(msg, &replica_);
  }
  absl::StatusOr<std::vector<float>> ReadResidual() const override { return residual_; }

 private:
  codec::FixedPointReplica replica_;
  std::vector<float> residual_;
};

}  // namespace

absl::Status NonFiniteParameterError(uint64_t index, float value) {
  return absl::InvalidArgumentError(absl::StrCat("parameter ", index, " is ", value,
                                                 " after the optimizer's step: nothing published"));
}

absl::StatusOr<std::unique_ptr<FlatReplica>> MakeHostFlatReplica(uint64_t param_count,
                                                                 int fraction_bits) {
  if (param_count == 0) return absl::InvalidArgumentError("a flat replica of 0 parameters");
  RECKON_ASSIGN_OR_RETURN(
      codec::FixedPointReplica replica,
      codec::FixedPointReplica::Create(param_count, fraction_bits,
                                       codec::FixedPointReplica::FloatCopy::kKept));
  return std::unique_ptr<FlatReplica>(new HostFlatReplica(std::move(replica)));
}

}  // namespace reckon::model
