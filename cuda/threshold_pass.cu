#include <cmath>
#include <cub/agent/single_pass_scan_operators.cuh>
#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cub/device/device_select.cuh>
#include <cuda/std/functional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "cuda/cuda_check.h"
#include "cuda/device_elementwise.h"
#include "cuda/event_timer.h"
#include "cuda/threshold_pass.h"

namespace reckon::cuda {
namespace {

constexpr uint32_t kNoWord = 0x7FFFFFFFu;  // index 2^31 - 1: never a real update
constexpr uint32_t kSign = 0x80000000u;
constexpr unsigned long long kNoBadIndex = ~0ull;

// The fused elementwise kernel's shape: each thread takes kItemsPerThread
// elements a block-width apart (coalesced), grid-striding over the rest.
constexpr int kFusedThreads = 256;
constexpr int kFusedItems = 4;

// The single-pass kernel's tile: 256 threads x 8 consecutive elements each,
// loaded and stored through shared memory (warp transpose). Measured on the
// H100 (docs/cuda.md): 16 elements a thread loaded as float4s straight into
// registers, with half the tiles, ran at 0.32-0.44x of this.
constexpr int kTileThreads = 256;
constexpr int kTileItems = 8;
constexpr int kTileElements = kTileThreads * kTileItems;

using TileState = cub::ScanTileState<int>;
using PlusInt = ::cuda::std::plus<int>;

// Strom's rule on one accumulated residual value (cuda/device_elementwise.h
// ThresholdElement, bit-exact with codec::QuantizeResidual); non-finite
// values emit nothing and record the lowest such index.
__device__ __forceinline__ bool Threshold(uint32_t index, float r, float tau, float* out,
                                          uint32_t* word, unsigned long long* first_bad) {
  const int sign = ThresholdElement(r, tau, out);
  if (sign == kThresholdNonFinite) {
    atomicMin(first_bad, static_cast<unsigned long long>(index));
    return false;
  }
  if (sign == 0) return false;
  *word = sign > 0 ? index : (kSign | index);
  return true;
}

// kCubSelect, step 1: every element's word (or kNoWord) into all_words.
__global__ void __launch_bounds__(kFusedThreads)
    FusedThresholdKernel(const float* __restrict__ delta, float* __restrict__ residual,
                         uint32_t* __restrict__ all_words, float* __restrict__ stash, uint32_t n,
                         float tau, unsigned long long* first_bad) {
  const uint64_t chunk = uint64_t{kFusedThreads} * kFusedItems;
  for (uint64_t base = uint64_t{blockIdx.x} * chunk + threadIdx.x; base < n;
       base += uint64_t{gridDim.x} * chunk) {
    float r[kFusedItems];
#pragma unroll
    for (int k = 0; k < kFusedItems; ++k) {
      const uint64_t i = base + static_cast<uint64_t>(k) * kFusedThreads;
      if (i < n) r[k] = delta != nullptr ? __fadd_rn(residual[i], delta[i]) : residual[i];
    }
#pragma unroll
    for (int k = 0; k < kFusedItems; ++k) {
      const uint64_t i = base + static_cast<uint64_t>(k) * kFusedThreads;
      if (i >= n) break;
      float out;
      uint32_t word = kNoWord;
      if (Threshold(static_cast<uint32_t>(i), r[k], tau, &out, &word, first_bad)) stash[i] = r[k];
      residual[i] = out;
      all_words[i] = word;
    }
  }
}

struct AtLeastTau {
  float tau;
  __device__ bool operator()(float r) const { return r >= tau || r <= -tau; }
};

struct IsWord {
  __device__ bool operator()(uint32_t word) const { return word != kNoWord; }
};

__global__ void InitTileStateKernel(TileState tile_state, int num_tiles) {
  tile_state.InitializeStatus(num_tiles);
}

// Where the pass's addend comes from. DeltaSource: a delta computed
// before (or none: the residual alone). OptimizerSource: the optimizer's
// rule applied here, from the gradient and its state (and the weights for
// weight decay), the state written back: the fused pass.
struct DeltaSource {
  const float* delta;  // may be null
};
struct OptimizerSource {
  OptimizerRule rule;
  const float* grad;
  float* state;          // null for sgd
  const float* weights;  // read only when rule.weight_decay != 0
};
// AdaGrad on the aggregate: OptimizerSource's, with what the peers moved
// each weight (PeerStep of `peers`).
struct AggregateAdagradSource {
  OptimizerSource optimizer;
  PeerMovement peers;
};

using TileLoad = cub::BlockLoad<float, kTileThreads, kTileItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
using TileStore = cub::BlockStore<float, kTileThreads, kTileItems, cub::BLOCK_STORE_WARP_TRANSPOSE>;
using TileScan = cub::BlockScan<int, kTileThreads>;
using TilePrefix = cub::TilePrefixCallbackOp<int, PlusInt, TileState>;

// One tile's shared memory: the loads, the stores and the scan take turns.
union TileTemp {
  TileLoad::TempStorage load;
  TileStore::TempStorage store;
  struct {
    TileScan::TempStorage scan;
    TilePrefix::TempStorage prefix;
  } scan;
};

// Where a tile is and how many of its elements are real.
struct Tile {
  int index;
  uint64_t base;
  int valid;
};

// kTileItems consecutive elements of `from` for each thread (through shared
// memory: a barrier after, so the storage can be reused).
__device__ __forceinline__ void LoadTile(TileTemp& temp, const Tile& tile, const float* from,
                                         float (&into)[kTileItems]) {
  TileLoad(temp.load).Load(from + tile.base, into, tile.valid, 0.0f);
  __syncthreads();
}

// r += the delta (none when it is null).
__device__ __forceinline__ void AddFrom(const DeltaSource& source, TileTemp& temp, const Tile& tile,
                                        float (&r)[kTileItems]) {
  if (source.delta == nullptr) return;
  float d[kTileItems];
  LoadTile(temp, tile, source.delta, d);
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) r[k] = AddRn(r[k], d[k]);
}

// r += the optimizer's change, computed here; its state written back.
__device__ __forceinline__ void AddFrom(const OptimizerSource& source, TileTemp& temp,
                                        const Tile& tile, float (&r)[kTileItems]) {
  const OptimizerRule& rule = source.rule;
  float g[kTileItems];
  LoadTile(temp, tile, source.grad, g);
  if (rule.weight_decay != 0.0f) {
    float w[kTileItems];
    LoadTile(temp, tile, source.weights, w);
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) g[k] = WithWeightDecay(rule, g[k], w[k]);
  }
  float state[kTileItems] = {};
  if (rule.kind != 0) LoadTile(temp, tile, source.state, state);
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) r[k] = AddRn(r[k], OptimizerDelta(rule, g[k], &state[k]));
  if (rule.kind != 0) {
    TileStore(temp.store).Store(source.state + tile.base, state, tile.valid);
    __syncthreads();
  }
}

// r += AdaGrad's change on the aggregate; h written back. The quanta are
// read blocked, each thread its kTileItems consecutive ones, directly (the
// tile's shared memory is sized for floats; this rule is the rare one).
__device__ __forceinline__ void AddFrom(const AggregateAdagradSource& source, TileTemp& temp,
                                        const Tile& tile, float (&r)[kTileItems]) {
  const OptimizerRule& rule = source.optimizer.rule;
  float g[kTileItems];
  LoadTile(temp, tile, source.optimizer.grad, g);
  if (rule.weight_decay != 0.0f) {
    float w[kTileItems];
    LoadTile(temp, tile, source.optimizer.weights, w);
#pragma unroll
    for (int k = 0; k < kTileItems; ++k) g[k] = WithWeightDecay(rule, g[k], w[k]);
  }
  float h[kTileItems];
  LoadTile(temp, tile, source.optimizer.state, h);
  int64_t now[kTileItems], after_own[kTileItems];
  cub::LoadDirectBlocked(static_cast<int>(threadIdx.x), source.peers.quanta + tile.base, now,
                         tile.valid, int64_t{0});
  cub::LoadDirectBlocked(static_cast<int>(threadIdx.x), source.peers.after_own + tile.base,
                         after_own, tile.valid, int64_t{0});
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) {
    const float peer_step = PeerStep(now[k], after_own[k], source.peers.quantum);
    r[k] = AddRn(r[k], AdagradAggregateDelta(rule, g[k], peer_step, &h[k]));
  }
  TileStore(temp.store).Store(source.optimizer.state + tile.base, h, tile.valid);
  __syncthreads();
}

// The emitted words of this thread, in index order: a block scan of the
// per-thread counts seeded by the decoupled look-back over earlier tiles
// gives each its slot. The last tile writes the total count.
__device__ __forceinline__ void WriteWordsInOrder(TileState tile_state, TileTemp& temp,
                                                  const Tile& tile, int emitted,
                                                  uint32_t emitted_mask,
                                                  const uint32_t (&words)[kTileItems],
                                                  uint32_t* __restrict__ words_out,
                                                  unsigned long long* counters) {
  __shared__ int tile_total;
  int offset = 0;
  if (tile.index == 0) {
    int aggregate = 0;
    TileScan(temp.scan.scan).ExclusiveSum(emitted, offset, aggregate);
    if (threadIdx.x == 0) {
      if (gridDim.x > 1) tile_state.SetInclusive(0, aggregate);
      tile_total = aggregate;
    }
  } else {
    TilePrefix prefix(tile_state, temp.scan.prefix, PlusInt{}, tile.index);
    TileScan(temp.scan.scan).ExclusiveScan(emitted, offset, PlusInt{}, prefix);
    __syncthreads();
    if (threadIdx.x == 0) tile_total = prefix.GetInclusivePrefix();
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) {
    if (emitted_mask & (1u << k)) words_out[offset++] = words[k];
  }
  if (tile.index + 1 == static_cast<int>(gridDim.x) && threadIdx.x == 0) {
    counters[0] = static_cast<unsigned long long>(tile_total);
  }
}

// kSinglePass: the pass and the compaction in one kernel. A tile's
// elements are loaded coalesced and transposed so that each thread holds
// kTileItems consecutive ones, the addend joins them, Strom's rule
// thresholds them, and the words go out in ascending index order.
template <typename Source>
__global__ void __launch_bounds__(kTileThreads)
    SinglePassThresholdKernel(TileState tile_state, Source source, float* __restrict__ residual,
                              uint32_t* __restrict__ words_out, float* __restrict__ stash,
                              uint32_t n, float tau, unsigned long long* counters) {
  __shared__ TileTemp temp;
  Tile tile;
  tile.index = static_cast<int>(blockIdx.x);
  tile.base = uint64_t(tile.index) * kTileElements;
  const uint64_t remaining = n - tile.base;
  tile.valid = remaining < kTileElements ? static_cast<int>(remaining) : kTileElements;

  float r[kTileItems];
  LoadTile(temp, tile, residual, r);
  AddFrom(source, temp, tile, r);

  uint32_t words[kTileItems];
  float out[kTileItems];
  int emitted = 0;
  uint32_t emitted_mask = 0;
#pragma unroll
  for (int k = 0; k < kTileItems; ++k) {
    const int local = threadIdx.x * kTileItems + k;
    out[k] = r[k];
    if (local < tile.valid) {
      const uint64_t i = tile.base + local;
      if (Threshold(static_cast<uint32_t>(i), r[k], tau, &out[k], &words[k], &counters[1])) {
        stash[i] = r[k];
        emitted_mask |= 1u << k;
        ++emitted;
      }
    }
  }
  TileStore(temp.store).Store(residual + tile.base, out, tile.valid);
  __syncthreads();
  WriteWordsInOrder(tile_state, temp, tile, emitted, emitted_mask, words, words_out, counters);
}

// NaN/Inf: put back the pre-subtraction value of every emitted element.
__global__ void RestoreKernel(const uint32_t* __restrict__ words, uint64_t count,
                              const float* __restrict__ stash, float* __restrict__ residual) {
  for (uint64_t k = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < count;
       k += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t i = words[k] & ~kSign;
    residual[i] = stash[i];
  }
}

int NumTiles(uint64_t n) { return static_cast<int>((n + kTileElements - 1) / kTileElements); }

}  // namespace

std::string CompactionMethodName(CompactionMethod method) {
  return method == CompactionMethod::kCubSelect ? "cub-select" : "single-pass";
}

absl::StatusOr<std::unique_ptr<ThresholdPass>> ThresholdPass::Create(uint64_t capacity,
                                                                     CompactionMethod method,
                                                                     cudaStream_t stream) {
  if (capacity > kMaxDeviceElements) {
    return absl::InvalidArgumentError(
        absl::StrCat("a device residual of ", capacity, " elements is more than 2^31 - 1"));
  }
  std::unique_ptr<ThresholdPass> pass(new ThresholdPass(capacity, method, stream));
  if (absl::Status s = pass->Allocate(); !s.ok()) return s;
  return pass;
}

absl::Status ThresholdPass::Allocate() {
  const uint64_t n = std::max<uint64_t>(capacity_, 1);
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_words_, n * sizeof(uint32_t)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_stash_, n * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_counters_, 2 * sizeof(unsigned long long)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_counters_, 2 * sizeof(unsigned long long)));
  if (method_ == CompactionMethod::kCubSelect) {
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_all_words_, n * sizeof(uint32_t)));
    RECKON_CUDA_RETURN_IF_ERROR(cub::DeviceSelect::If(nullptr, temp_bytes_, d_all_words_, d_words_,
                                                      d_counters_, static_cast<int64_t>(n),
                                                      IsWord{}, stream_));
  } else {
    RECKON_CUDA_RETURN_IF_ERROR(TileState::AllocationSize(NumTiles(n), temp_bytes_));
  }
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_temp_, std::max<size_t>(temp_bytes_, 1)));
  // Room for a density of 1/64 up front; Finish grows it if ever needed.
  h_words_capacity_ = std::max<uint64_t>(n / 64, 1024);
  RECKON_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_words_, h_words_capacity_ * sizeof(uint32_t)));
  return absl::OkStatus();
}

ThresholdPass::~ThresholdPass() {
  // Errors here cannot be reported; a lost context frees everything anyway.
  cudaFree(d_words_);
  cudaFree(d_all_words_);
  cudaFree(d_stash_);
  cudaFree(d_temp_);
  cudaFree(d_counters_);
  cudaFreeHost(h_counters_);
  cudaFreeHost(h_words_);
}

absl::Status ThresholdPass::Begin(float* d_residual, uint64_t n, float tau) {
  if (n > capacity_) {
    return absl::InvalidArgumentError(
        absl::StrCat("residual of ", n, " elements, pass sized for ", capacity_));
  }
  if (!(tau > 0) || !std::isfinite(tau)) {
    return absl::InvalidArgumentError(absl::StrCat("threshold tau ", tau, " must be positive"));
  }
  if (launched_) return absl::FailedPreconditionError("ThresholdPass::Launch twice without Finish");
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_counters_, 0, sizeof(unsigned long long), stream_));
  RECKON_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(d_counters_ + 1, 0xFF, sizeof(unsigned long long), stream_));
  launched_ = true;
  launched_residual_ = d_residual;
  finished_count_ = 0;
  return absl::OkStatus();
}

template <typename Source>
absl::Status ThresholdPass::LaunchSinglePass(const Source& source, float* d_residual, uint64_t n,
                                             float tau) {
  const int tiles = NumTiles(n);
  TileState tile_state;
  RECKON_CUDA_RETURN_IF_ERROR(tile_state.Init(tiles, d_temp_, temp_bytes_));
  constexpr int kInitThreads = 128;
  InitTileStateKernel<<<(tiles + kInitThreads - 1) / kInitThreads, kInitThreads, 0, stream_>>>(
      tile_state, tiles);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("InitTileStateKernel");
  const uint32_t n32 = static_cast<uint32_t>(n);
  SinglePassThresholdKernel<<<tiles, kTileThreads, 0, stream_>>>(
      tile_state, source, d_residual, d_words_, d_stash_, n32, tau, d_counters_);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("SinglePassThresholdKernel");
  return absl::OkStatus();
}

absl::Status ThresholdPass::Launch(const float* d_delta, float* d_residual, uint64_t n, float tau) {
  RECKON_RETURN_IF_ERROR(Begin(d_residual, n, tau));
  if (n == 0) return absl::OkStatus();
  if (method_ != CompactionMethod::kCubSelect) {
    return LaunchSinglePass(DeltaSource{d_delta}, d_residual, n, tau);
  }
  const uint64_t chunks = (n + kFusedThreads * kFusedItems - 1) / (kFusedThreads * kFusedItems);
  const unsigned grid = static_cast<unsigned>(std::min<uint64_t>(chunks, 1u << 20));
  FusedThresholdKernel<<<grid, kFusedThreads, 0, stream_>>>(
      d_delta, d_residual, d_all_words_, d_stash_, static_cast<uint32_t>(n), tau, d_counters_ + 1);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("FusedThresholdKernel");
  size_t bytes = temp_bytes_;
  RECKON_CUDA_RETURN_IF_ERROR(cub::DeviceSelect::If(d_temp_, bytes, d_all_words_, d_words_,
                                                    d_counters_, static_cast<int64_t>(n), IsWord{},
                                                    stream_));
  return absl::OkStatus();
}

absl::Status ThresholdPass::LaunchFused(const OptimizerRule& rule, const float* d_grad,
                                        float* d_state, const float* d_weights, float* d_residual,
                                        uint64_t n, float tau, const PeerMovement& peers) {
  if (method_ == CompactionMethod::kCubSelect) {
    return absl::FailedPreconditionError(
        "the fused optimizer pass needs a single-pass method, not cub-select");
  }
  if (rule.kind < 0 || rule.kind > 2 || (rule.kind != 0 && d_state == nullptr) ||
      (rule.weight_decay != 0 && d_weights == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("fused pass: optimizer kind ", rule.kind,
                                                   " without the state or weights it reads"));
  }
  if (peers.quanta != nullptr && (rule.kind != 2 || peers.after_own == nullptr)) {
    return absl::InvalidArgumentError(
        "fused pass: the peers' movement is AdaGrad's on the aggregate only");
  }
  RECKON_RETURN_IF_ERROR(Begin(d_residual, n, tau));
  if (n == 0) return absl::OkStatus();
  const OptimizerSource optimizer{rule, d_grad, d_state, d_weights};
  if (peers.quanta != nullptr) {
    return LaunchSinglePass(AggregateAdagradSource{optimizer, peers}, d_residual, n, tau);
  }
  return LaunchSinglePass(optimizer, d_residual, n, tau);
}

absl::StatusOr<uint64_t> ThresholdPass::FinishOnDevice() {
  if (!launched_) return absl::FailedPreconditionError("ThresholdPass::Finish without Launch");
  launched_ = false;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      h_counters_, d_counters_, 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream_));
  RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (h_counters_[1] != kNoBadIndex) {
    if (absl::Status s = RestoreAndReport(launched_residual_); !s.ok()) return s;
  }
  return h_counters_[0];
}

absl::Status ThresholdPass::RestoreAndReport(float* d_residual) {
  const uint64_t count = h_counters_[0];
  const uint64_t bad = h_counters_[1];
  if (count > 0) {
    const unsigned grid = static_cast<unsigned>(std::min<uint64_t>((count + 255) / 256, 65535));
    RestoreKernel<<<grid, 256, 0, stream_>>>(d_words_, count, d_stash_, d_residual);
    RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("RestoreKernel");
  }
  float value = 0;
  RECKON_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(&value, d_residual + bad, sizeof(float), cudaMemcpyDeviceToHost, stream_));
  RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::InvalidArgumentError(
      absl::StrCat("residual element ", bad, " is ", std::isnan(value) ? "NaN" : "infinite",
                   "; nothing was emitted (diverged training? lower the learning rate)"));
}

absl::Status ThresholdPass::Finish(std::vector<uint32_t>* words) {
  words->clear();
  absl::StatusOr<uint64_t> count = FinishOnDevice();
  if (!count.ok()) return count.status();
  if (*count == 0) return absl::OkStatus();
  if (*count > h_words_capacity_) {
    RECKON_CUDA_RETURN_IF_ERROR(cudaFreeHost(h_words_));
    h_words_ = nullptr;
    h_words_capacity_ = *count;
    RECKON_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_words_, h_words_capacity_ * sizeof(uint32_t)));
  }
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_words_, d_words_, *count * sizeof(uint32_t),
                                              cudaMemcpyDeviceToHost, stream_));
  RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  words->assign(h_words_, h_words_ + *count);
  finished_count_ = *count;
  return absl::OkStatus();
}

absl::StatusOr<double> TimeSelectIfOnResidual(const float* d_residual, uint64_t n, float tau,
                                              int reps) {
  float* d_out = nullptr;
  unsigned long long* d_count = nullptr;
  void* d_temp = nullptr;
  size_t temp_bytes = 0;
  auto run = [&]() -> absl::StatusOr<double> {
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_out, std::max<uint64_t>(n, 1) * sizeof(float)));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_count, sizeof(unsigned long long)));
    RECKON_CUDA_RETURN_IF_ERROR(cub::DeviceSelect::If(
        nullptr, temp_bytes, d_residual, d_out, d_count, static_cast<int64_t>(n), AtLeastTau{tau}));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_temp, std::max<size_t>(temp_bytes, 1)));
    return BestEventSeconds(
        reps, [] { return absl::OkStatus(); },
        [&]() -> absl::Status {
          size_t bytes = temp_bytes;
          RECKON_CUDA_RETURN_IF_ERROR(cub::DeviceSelect::If(
              d_temp, bytes, d_residual, d_out, d_count, static_cast<int64_t>(n), AtLeastTau{tau}));
          return absl::OkStatus();
        });
  };
  absl::StatusOr<double> seconds = run();
  cudaFree(d_out);
  cudaFree(d_count);
  cudaFree(d_temp);
  return seconds;
}

}  // namespace reckon::cuda
