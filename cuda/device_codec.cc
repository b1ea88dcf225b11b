#include "cuda/device_codec.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "cuda/codec_kernels.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"

namespace reckon::cuda {
namespace {

class DeviceCodecImpl final : public DeviceCodec {
 public:
  DeviceCodecImpl(const codec::CodecOptions& options, cudaStream_t stream)
      : options_(options), stream_(stream) {}

  absl::Status Init() {
    std::vector<DeviceTensor> tensors;
    uint64_t offset = 0;
    for (const codec::TensorShape& t : options_.layout) {
      tensors.push_back({offset, t.rows, t.cols, total_columns_});
      offset += t.size();
      total_columns_ += t.cols;
      largest_tensor_ = std::max(largest_tensor_, t.size());
    }
    param_count_ = offset;
    tensor_count_ = static_cast<int>(tensors.size());
    RECKON_RETURN_IF_ERROR(tensors_.Resize(tensors.size()));
    RECKON_RETURN_IF_ERROR(Upload(tensors_.get(), tensors.data(), tensors.size()));
    RECKON_RETURN_IF_ERROR(first_bad_.Resize(1));
    RECKON_RETURN_IF_ERROR(h_first_bad_.Resize(1));
    RECKON_RETURN_IF_ERROR(quanta_.Resize(param_count_));
    RECKON_RETURN_IF_ERROR(h_quanta_.Resize(param_count_));
    if (options_.codec == v1::CODEC_ONEBIT) {
      RECKON_RETURN_IF_ERROR(column_values_.Resize(2 * size_t{total_columns_}));
      RECKON_RETURN_IF_ERROR(h_column_values_.Resize(2 * size_t{total_columns_}));
      RECKON_RETURN_IF_ERROR(sign_words_.Resize((param_count_ + 31) / 32));
      RECKON_RETURN_IF_ERROR(h_sign_words_.Resize((param_count_ + 31) / 32));
    } else {
      std::vector<uint64_t> fractions(256);
      for (uint32_t m = 0; m < 128; ++m) {
        const codec::DynTreeFraction f = codec::DynTreeMagnitude(m);
        fractions[2 * m] = f.numerator;
        fractions[2 * m + 1] = f.denominator;
      }
      RECKON_RETURN_IF_ERROR(fractions_.Resize(fractions.size()));
      RECKON_RETURN_IF_ERROR(Upload(fractions_.get(), fractions.data(), fractions.size()));
      RECKON_RETURN_IF_ERROR(midpoints_.Resize(127));
      RECKON_RETURN_IF_ERROR(Upload(midpoints_.get(), codec::DynTreeMidpoints(), 127));
      RECKON_RETURN_IF_ERROR(absmax_bits_.Resize(tensors.size()));
      RECKON_RETURN_IF_ERROR(scales_.Resize(tensors.size()));
      // The host codec's scales start at 0 (used only if a first step did
      // not rescale, which absmax_every >= 1 rules out).
      RECKON_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(scales_.get(), 0, sizeof(float) * tensors.size(), stream_));
      RECKON_RETURN_IF_ERROR(h_scales_.Resize(tensors.size()));
      RECKON_RETURN_IF_ERROR(tables_.Resize(128 * tensors.size()));
      RECKON_RETURN_IF_ERROR(to_normalized_.Resize(tensors.size()));
      RECKON_RETURN_IF_ERROR(codes_.Resize(param_count_));
      RECKON_RETURN_IF_ERROR(h_codes_.Resize(param_count_));
    }
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::Status Encode(const float* delta, float* residual, size_t n, v1::Update* msg,
                      std::vector<int64_t>* quanta) override {
    quanta->clear();
    if (n != param_count_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device codec: ", n, " values for a layout of ", param_count_, " parameters"));
    }
    const int fb = options_.fraction_bits;
    const double quantum = std::ldexp(1.0, -fb);
    const bool feedback = options_.error_feedback;
    RECKON_RETURN_IF_ERROR(
        LaunchAccumulateChecked(delta, residual, n, fb, first_bad_.get(), stream_));
    if (options_.codec == v1::CODEC_ONEBIT) {
      RECKON_RETURN_IF_ERROR(LaunchOneBitColumns(residual, tensors_.get(), tensor_count_,
                                                 total_columns_, fb, first_bad_.get(),
                                                 column_values_.get(), stream_));
      RECKON_RETURN_IF_ERROR(LaunchOneBitQuantize(
          residual, n, tensors_.get(), tensor_count_, column_values_.get(), feedback, quantum,
          first_bad_.get(), sign_words_.get(), quanta_.get(), stream_));
      RECKON_RETURN_IF_ERROR(
          Download(h_column_values_.get(), column_values_.get(), 2 * size_t{total_columns_}));
      RECKON_RETURN_IF_ERROR(Download(h_sign_words_.get(), sign_words_.get(), (n + 31) / 32));
    } else {
      const bool rescale = steps_ % static_cast<uint64_t>(options_.absmax_every) == 0;
      if (rescale) {
        RECKON_RETURN_IF_ERROR(LaunchAbsMax(residual, tensors_.get(), tensor_count_,
                                            first_bad_.get(), absmax_bits_.get(), stream_));
      }
      RECKON_RETURN_IF_ERROR(LaunchDynTreeTables(absmax_bits_.get(), tensor_count_, rescale, fb,
                                                 fractions_.get(), first_bad_.get(), scales_.get(),
                                                 tables_.get(), to_normalized_.get(), stream_));
      RECKON_RETURN_IF_ERROR(
          LaunchDynTree8Encode(residual, tensors_.get(), tensor_count_, largest_tensor_,
                               tables_.get(), to_normalized_.get(), midpoints_.get(), feedback,
                               quantum, first_bad_.get(), codes_.get(), quanta_.get(), stream_));
      RECKON_RETURN_IF_ERROR(Download(h_scales_.get(), scales_.get(), size_t(tensor_count_)));
      RECKON_RETURN_IF_ERROR(Download(h_codes_.get(), codes_.get(), n));
    }
    RECKON_RETURN_IF_ERROR(Download(h_quanta_.get(), quanta_.get(), n));
    RECKON_RETURN_IF_ERROR(Download(h_first_bad_.get(), first_bad_.get(), 1));
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));

    if (const unsigned long long bad = h_first_bad_.get()[0]; bad != ~0ull) {
      float value = 0;
      RECKON_RETURN_IF_ERROR(
          CopyToHost(residual + bad, &value, sizeof(value), stream_, "the residual"));
      return absl::InvalidArgumentError(
          absl::StrCat("residual element ", bad, " is ", value,
                       "; nothing was emitted (diverged training? lower the learning rate)"));
    }
    if (options_.codec == v1::CODEC_ONEBIT) {
      // The words' little-endian bytes, LSB first, are the payload's sign
      // bytes: read in place (the host is little-endian, as the payload is).
      const std::span<const uint8_t> signs(reinterpret_cast<const uint8_t*>(h_sign_words_.get()),
                                           (n + 7) / 8);
      codec::FinishOneBitMessage(
          options_.layout,
          std::span<const float>(h_column_values_.get(), 2 * size_t{total_columns_}), signs, msg);
    } else {
      codec::FinishDynTree8Message(options_.layout,
                                   std::span<const float>(h_scales_.get(), size_t(tensor_count_)),
                                   std::span<const uint8_t>(h_codes_.get(), n), msg);
    }
    quanta->assign(h_quanta_.get(), h_quanta_.get() + n);
    ++steps_;
    return absl::OkStatus();
  }

  absl::StatusOr<codec::CodecState> State() const override {
    if (options_.codec != v1::CODEC_DYNTREE8) return codec::CodecState{};
    codec::CodecState state;
    state.steps = steps_;
    state.scales.resize(size_t(tensor_count_));
    RECKON_RETURN_IF_ERROR(CopyToHost(scales_.get(), state.scales.data(),
                                      state.scales.size() * sizeof(float), stream_,
                                      "the dyntree8 scales"));
    return state;
  }

  absl::Status Restore(const codec::CodecState& state) override {
    // The host codec's checks (the same options, so the same codec).
    absl::StatusOr<std::unique_ptr<codec::Codec>> host = codec::MakeCodec(options_);
    if (!host.ok()) return host.status();
    RECKON_RETURN_IF_ERROR((*host)->Restore(state));
    if (options_.codec != v1::CODEC_DYNTREE8) return absl::OkStatus();
    if (state.scales.empty()) {  // a fresh codec's
      RECKON_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(scales_.get(), 0, sizeof(float) * size_t(tensor_count_), stream_));
    } else {
      RECKON_RETURN_IF_ERROR(Upload(scales_.get(), state.scales.data(), state.scales.size()));
    }
    RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    steps_ = state.steps;
    return absl::OkStatus();
  }

 private:
  template <typename T>
  absl::Status Upload(T* device, const T* host, size_t count) {
    RECKON_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device, host, count * sizeof(T), cudaMemcpyHostToDevice, stream_));
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Download(T* host, const T* device, size_t count) {
    RECKON_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, stream_));
    return absl::OkStatus();
  }

  const codec::CodecOptions options_;
  const cudaStream_t stream_;
  uint64_t param_count_ = 0;
  int tensor_count_ = 0;
  uint32_t total_columns_ = 0;
  uint64_t largest_tensor_ = 0;
  uint64_t steps_ = 0;  // dyntree8: encoded steps, for absmax_every (as the host codec counts)
  DeviceBuffer<DeviceTensor> tensors_;
  DeviceBuffer<unsigned long long> first_bad_;
  PinnedBuffer<unsigned long long> h_first_bad_;
  DeviceBuffer<int64_t> quanta_;
  PinnedBuffer<int64_t> h_quanta_;
  // onebit
  DeviceBuffer<float> column_values_;
  PinnedBuffer<float> h_column_values_;
  DeviceBuffer<uint32_t> sign_words_;
  PinnedBuffer<uint32_t> h_sign_words_;
  // dyntree8
  DeviceBuffer<uint64_t> fractions_;
  DeviceBuffer<double> midpoints_;
  DeviceBuffer<uint32_t> absmax_bits_;
  DeviceBuffer<float> scales_;
  PinnedBuffer<float> h_scales_;
  DeviceBuffer<int64_t> tables_;
  DeviceBuffer<double> to_normalized_;
  DeviceBuffer<uint8_t> codes_;
  PinnedBuffer<uint8_t> h_codes_;
};

}  // namespace

bool HasDeviceCodec(const codec::CodecOptions& options) {
  return options.codec == v1::CODEC_ONEBIT || options.codec == v1::CODEC_DYNTREE8;
}

absl::StatusOr<std::unique_ptr<DeviceCodec>> MakeDeviceCodec(const codec::CodecOptions& options,
                                                             cudaStream_t stream) {
  if (!HasDeviceCodec(options)) {
    return absl::InvalidArgumentError(
        absl::StrCat("no device encoder for codec ", codec::CodecFlagName(options.codec)));
  }
  RECKON_RETURN_IF_ERROR(codec::MakeCodec(options).status());  // the options' own checks
  auto impl = std::make_unique<DeviceCodecImpl>(options, stream);
  RECKON_RETURN_IF_ERROR(impl->Init());
  return impl;
}

}  // namespace reckon::cuda
