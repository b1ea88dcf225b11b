// The dense round trip's passes, each timed alone (docs/benchmarks.md "The
// round trip under a tenth of the step", issue 57 item 2): first on one
// 16 KB block (4,096 values) kept in the L1 cache, where a pass costs its
// instructions, then the replica's sum with its float copy over one core's
// half of a 669,706-parameter model read from memory (a 64 MiB buffer
// walked between runs), where it costs its bytes. ns a block and us a half,
// best and mean; one core.
//
//   cmake --build build --target round_trip_passes && build/tests/round_trip_passes
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "codec/codec.h"
#include "codec/crc32c.h"
#include "codec/elementwise.h"
using namespace reckon::codec;

namespace {

// ns a call of fn, the mean over `reps` calls.
template <typename Fn>
double MeanNs(int reps, Fn fn) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn(i);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps * 1e9;
}

}  // namespace

int main() {
  constexpr size_t kBlock = kCacheBlockValues;
  constexpr int kFractionBits = 10;
  constexpr double kQuantum = 1.0 / (1 << kFractionBits);
  std::vector<float> residual(kBlock);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 3e-3f);
  for (float& v : residual) v = normal(rng);
  std::vector<char> payload(4 * kBlock);
  EncodeDenseFp32Values(residual.data(), kBlock, kFractionBits, payload.data());
  std::vector<int64_t> quanta(kBlock, 12345);
  std::vector<float> weights(kBlock);
  uint64_t sink = 0;
  constexpr int kReps = 200000;
  std::printf("one %zu-value block in the L1 cache, ns a call (mean of %d):\n", kBlock, kReps);
  std::printf("  encode              %6.0f\n", MeanNs(kReps, [&](int i) {
                residual[size_t(i) % kBlock] += 1e-9f;
                EncodeDenseFp32Values(residual.data(), kBlock, kFractionBits, payload.data());
              }));
  std::printf("  feedback            %6.0f\n", MeanNs(kReps, [&](int) {
                SubtractDenseFp32(residual.data(), payload.data(), kBlock, kFractionBits);
              }));
  std::printf("  CRC-32C             %6.0f\n", MeanNs(kReps, [&](int) {
                sink += Crc32c(payload.data(), payload.size(), static_cast<uint32_t>(sink));
              }));
  std::printf("  validity walk       %6.0f\n",
              MeanNs(kReps, [&](int) { sink += DenseFp32ValuesValid(payload.data(), kBlock); }));
  std::printf("  sum                 %6.0f\n", MeanNs(kReps, [&](int) {
                sink += AddDenseFp32Wrapping(quanta.data(), payload.data(), kBlock);
              }));
  std::printf("  float copy alone    %6.0f\n", MeanNs(kReps, [&](int) {
                QuantaToFloats(quanta.data(), kBlock, kQuantum, weights.data());
              }));
  std::printf("  sum with its copy   %6.0f\n", MeanNs(kReps, [&](int) {
                sink += AddDenseFp32Wrapping(quanta.data(), payload.data(), kBlock,
                                             {weights.data(), kQuantum});
              }));
  // dyntree8's encode loop, each copy this CPU has, on the same block (its
  // values about 1e-3 of the abs max: codes from the middle of the table).
  std::vector<int64_t> magnitudes(128);
  for (uint32_t m = 0; m < 128; ++m) magnitudes[m] = DynTreeQuanta(m, int64_t{1} << 40);
  std::vector<char> codes(kBlock);
  for (const auto& [name, isa] :
       {std::pair{"portable", Isa::kPortable}, {"AVX2", Isa::kAvx2}, {"best", Isa::kBest}}) {
    std::printf("  dyntree8 encode, %-8s %6.0f (%s)\n", name,
                MeanNs(kReps / 4,
                       [&](int) {
                         DynTreeEncodeValues(residual.data(), kBlock, 30.0, magnitudes.data(),
                                             codes.data(), quanta.data(), isa);
                         sink += uint8_t(codes[0]);
                       }),
                ElementwiseCopy(isa));
  }

  const size_t half = 669706 / 2;
  std::vector<int64_t> replica(half, 77);
  std::vector<float> copy(half);
  std::vector<char> delta(4 * half);
  for (size_t i = 0; i < half; ++i) {
    const float v = static_cast<float>(static_cast<int>(i % 7) - 3);
    std::memcpy(delta.data() + 4 * i, &v, 4);
  }
  std::vector<char> evict(64 << 20, 1);
  double best = 1e18, total = 0;
  constexpr int kRuns = 40;
  for (int run = 0; run < kRuns; ++run) {
    for (size_t i = 0; i < evict.size(); i += 64) ++evict[i];
    const double ns = MeanNs(1, [&](int) {
      sink += AddDenseFp32Wrapping(replica.data(), delta.data(), half, {copy.data(), kQuantum});
    });
    best = std::min(best, ns);
    total += ns;
  }
  std::printf(
      "one core's half of 669,706 parameters from memory, sum with its copy: best %.0f us, "
      "mean %.0f us (%d runs)\n",
      best / 1e3, total / kRuns / 1e3, kRuns);
  return sink == 42 ? 1 : 0;  // keeps every call
}
