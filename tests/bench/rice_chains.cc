// The Rice decode's two-chain rounds against its one chain, side by side in
// one run (docs/benchmarks.md "`reckonctl bench inbound`", issue 57 item 1):
// one Strom-sized message (14.4 M parameters, the density given, the optimal
// k) decoded by DecodeRice with rounds off, on with the indices summed by the
// best copy the CPU has (AVX-512, else AVX2), and on with them summed
// portably; ns a word and the ratios, three times; checks every word.
//
//   cmake --build build --target rice_chains && build/tests/rice_chains 0.003
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "codec/rice.h"
#include "tests/bench/density_arg.h"
using namespace reckon::codec;
int main(int argc, char** argv) {
  const uint64_t params = 14'400'000;
  const double density = reckon::bench::DensityArg(argc, argv, 0.003);
  std::mt19937_64 rng(3);
  std::vector<uint32_t> w;
  for (uint64_t p = 0; p < params; ++p) {
    if ((rng() % 1000000) < density * 1e6) w.push_back(uint32_t(p) | (uint32_t(rng() & 1) << 31));
  }
  const uint32_t k = OptimalRiceK(w);
  std::string payload;
  EncodeRice(w, k, &payload);
  const RiceDecodeTuning tunings[] = {
      {0, Isa::kPortable}, {}, {RiceDecodeTuning{}.round_codes, Isa::kPortable}};
  std::vector<uint32_t> out[3];
  const int reps = 400;
  for (int rep = 0; rep < 3; ++rep) {
    double ns[3];
    for (int t = 0; t < 3; ++t) {
      const auto start = std::chrono::steady_clock::now();
      for (int x = 0; x < reps; ++x) {
        if (!DecodeRice(payload, w.size(), k, params, &out[t], tunings[t]).ok()) return 1;
      }
      ns[t] = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
                  .count() /
              reps / w.size();
    }
    std::printf(
        "density %.4f words %zu k %u: one chain %.2f ns/word, two chains (%s indices) %.2f "
        "(%.2fx), two chains with portable indices %.2f (%.2fx)\n",
        density, w.size(), k, ns[0], ElementwiseCopy(Isa::kBest), ns[1], ns[0] / ns[1], ns[2],
        ns[0] / ns[2]);
  }
  const bool same = out[0] == w && out[1] == w && out[2] == w;
  std::printf("%s\n", same ? "every word decoded" : "MISMATCH");
  return same ? 0 : 1;
}
