// Would a Rice message in four independent streams decode faster per core?
// (docs/benchmarks.md "`reckonctl bench inbound`", issue 57 item 1.) One
// Strom-sized message (14.4 M parameters, the density given) decoded by the
// library's DecodeRice, against the same words in four streams of a quarter
// each (each stream's first index given, as a multi-stream format's header
// would) decoded by the library's group fast path interleaved over the four
// in one loop, so that the out-of-order core could overlap four chains.
// Prints both times a word and their ratio, three times; checks every word.
//
//   cmake --build build --target rice_streams && build/tests/rice_streams 0.003
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "codec/rice.h"
#include "tests/bench/density_arg.h"
using namespace reckon::codec;
struct Reader {
  const unsigned char* d;
  size_t n;
  uint64_t Peek(uint64_t pos) const {
    uint64_t b = pos >> 3, v = 0;
    if (b + 8 <= n)
      std::memcpy(&v, d + b, 8);
    else if (b < n)
      std::memcpy(&v, d + b, n - b);
    return v >> (pos & 7);
  }
};
// One code, a long unary run included (no error checks: the bench's streams are valid).
void OneSlow(const Reader& r, uint32_t k, uint64_t* pos, uint64_t* next, uint32_t* out) {
  uint64_t q = 0, v = r.Peek(*pos) & ((uint64_t{1} << 57) - 1);
  while (v == 0) {
    q += 57;
    *pos += 57;
    v = r.Peek(*pos) & ((uint64_t{1} << 57) - 1);
  }
  const unsigned z = std::countr_zero(v);
  q += z;
  *pos += z + 1;
  const uint64_t tail = r.Peek(*pos);
  *pos += k + 1;
  const uint64_t index = *next + ((q << k) | (tail & ((uint64_t{1} << k) - 1)));
  *out = uint32_t(index) | uint32_t(((tail >> k) & 1) << 31);
  *next = index + 1;
}
template <size_t S, size_t G>
void Decode4(const Reader* r, const uint64_t* counts, const uint64_t* first_next, uint32_t k,
             uint32_t* const* outs) {
  uint64_t pos[S] = {}, next[S], i[S] = {};
  for (size_t s = 0; s < S; ++s) next[s] = first_next[s];
  const uint64_t low = (uint64_t{1} << k) - 1;
  const unsigned fixed = k + 2;
  uint64_t m = counts[0];
  for (size_t s = 1; s < S; ++s) m = std::min(m, counts[s]);
  while (i[0] + G <= m) {
    for (size_t s = 0; s < S; ++s) {
      uint64_t v = r[s].Peek(pos[s]);
      uint64_t consumed = 0, gn = next[s];
      for (size_t g = 0; g < G; ++g) {
        const uint64_t q = std::countr_zero(v | (uint64_t{1} << 63));
        const uint64_t at = v >> q;
        const uint64_t tail = at >> 1;
        const uint64_t index = gn + ((q << k) | (tail & low));
        outs[s][i[s] + g] = uint32_t(index) | uint32_t(((tail >> k) & 1) << 31);
        gn = index + 1;
        consumed += q + fixed;
        v = at >> fixed;
      }
      if (consumed <= 57) [[likely]] {
        pos[s] += consumed;
        next[s] = gn;
        i[s] += G;
        continue;
      }
      for (size_t g = 0; g < G; ++g) OneSlow(r[s], k, &pos[s], &next[s], &outs[s][i[s]++]);
    }
  }
  for (size_t s = 0; s < S; ++s)
    while (i[s] < counts[s]) OneSlow(r[s], k, &pos[s], &next[s], &outs[s][i[s]++]);
}
int main(int argc, char** argv) {
  const uint64_t params = 14'400'000;
  const double density = reckon::bench::DensityArg(argc, argv, 0.003);
  std::mt19937_64 rng(3);
  std::vector<uint32_t> w;
  for (uint64_t p = 0; p < params; ++p)
    if ((rng() % 1000000) < density * 1e6) w.push_back(uint32_t(p) | (uint32_t(rng() & 1) << 31));
  const uint32_t k = OptimalRiceK(w);
  std::string one;
  EncodeRice(w, k, &one);
  constexpr size_t S = 4;
  std::string part[S];
  uint64_t counts[S], first_next[S];
  for (size_t s = 0; s < S; ++s) {
    size_t b = w.size() * s / S, e = w.size() * (s + 1) / S;
    uint32_t base = s == 0 ? 0 : (w[b - 1] & 0x7fffffff) + 1;
    std::vector<uint32_t> sh;
    for (size_t j = b; j < e; ++j)
      sh.push_back(((w[j] & 0x7fffffff) - base) | (w[j] & 0x80000000u));
    EncodeRice(sh, k, &part[s]);
    counts[s] = e - b;
    first_next[s] = base;
    part[s].append(8, '\0');
  }
  std::vector<uint32_t> out;
  std::vector<std::vector<uint32_t>> o4(S, std::vector<uint32_t>(w.size()));
  Reader r[S];
  uint32_t* outs[S];
  for (size_t s = 0; s < S; ++s) {
    r[s] = {(const unsigned char*)part[s].data(), part[s].size()};
    outs[s] = o4[s].data();
  }
  const int reps = 300;
  double t1 = 0, t4 = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto a = std::chrono::steady_clock::now();
    for (int x = 0; x < reps; ++x) {
      if (!DecodeRice(one, w.size(), k, params, &out).ok()) return 1;
    }
    auto b = std::chrono::steady_clock::now();
    for (int x = 0; x < reps; ++x) {
      switch (std::clamp<size_t>(48 / (k + 3), 1, 8)) {
        case 4:
          Decode4<S, 4>(r, counts, first_next, k, outs);
          break;
        case 5:
          Decode4<S, 5>(r, counts, first_next, k, outs);
          break;
        case 3:
          Decode4<S, 3>(r, counts, first_next, k, outs);
          break;
        default:
          Decode4<S, 2>(r, counts, first_next, k, outs);
      }
    }
    auto c = std::chrono::steady_clock::now();
    t1 = std::chrono::duration<double, std::micro>(b - a).count() / reps;
    t4 = std::chrono::duration<double, std::micro>(c - b).count() / reps;
    printf(
        "density %.4f words %zu k %u: one stream %.1f us (%.2f ns/word), four interleaved %.1f us "
        "(%.2f ns/word): %.2fx\n",
        density, w.size(), k, t1, 1e3 * t1 / w.size(), t4, 1e3 * t4 / w.size(), t1 / t4);
  }
  size_t bad = 0;
  for (size_t s = 0; s < S; ++s) {
    size_t b = w.size() * s / S, e = w.size() * (s + 1) / S;
    for (size_t j = 0; b + j < e; ++j) bad += o4[s][j] != w[b + j];
  }
  printf("mismatches %zu\n", bad);
}
