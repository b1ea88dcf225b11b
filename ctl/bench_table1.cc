// reckonctl bench codec --codec dyntree8 --table1: Dettmers 2015 Table 1 for
// the 8-bit dynamic tree. 25M draws from each of the paper's four
// distributions, normalized by their absolute maximum (as the paper did),
// coded with the codec's own nearest-code and magnitude functions
// (codec/codec.h), denormalized, and the mean absolute and mean relative
// errors printed beside the paper's figures.
#include <array>
#include <cmath>
#include <functional>
#include <random>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/json.h"
#include "codec/codec.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"

ABSL_DECLARE_FLAG(std::string, codec);
ABSL_DECLARE_FLAG(int64_t, seed);
ABSL_FLAG(bool, table1, false, "bench codec: Dettmers 2015 Table 1 for --codec dyntree8");
ABSL_FLAG(int64_t, draws, 25'000'000, "bench codec --table1: samples per distribution");

namespace reckon::ctl {
namespace {

struct Distribution {
  const char* name;
  double mean_abs_paper, mean_rel_pct_paper;
  std::function<double(std::mt19937_64&)> draw;
};

struct Errors {
  double mean_abs = 0, mean_rel_pct = 0;
};

Errors Measure(const Distribution& d, int64_t draws, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> x(static_cast<size_t>(draws));
  double absmax = 0;
  for (double& v : x) {
    v = d.draw(rng);
    absmax = std::max(absmax, std::fabs(v));
  }
  std::array<double, 128> magnitude{};
  for (uint32_t m = 0; m < 128; ++m) {
    const codec::DynTreeFraction f = codec::DynTreeMagnitude(m);
    magnitude[m] = double(f.numerator) / double(f.denominator);
  }
  double abs_sum = 0, rel_sum = 0;
  int64_t rel_count = 0;
  for (const double v : x) {
    const uint32_t m = codec::DynTreeNearestCode(std::fabs(v) / absmax);
    const double back = std::copysign(magnitude[m] * absmax, v);
    abs_sum += std::fabs(v - back);
    if (v != 0) {
      rel_sum += std::fabs(v - back) / std::fabs(v);
      ++rel_count;
    }
  }
  return {abs_sum / double(draws), 100 * rel_sum / double(std::max<int64_t>(1, rel_count))};
}

}  // namespace

int RunBenchTable1(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl bench codec --table1",
                              {{"codec"}, {"table1"}, {"draws"}, {"seed"}, {"json"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  if (absl::GetFlag(FLAGS_codec) != "dyntree8") {
    err << "reckonctl bench codec: --table1 reproduces Dettmers 2015 Table 1: give --codec "
           "dyntree8\n";
    return kExitUsage;
  }
  const int64_t draws = absl::GetFlag(FLAGS_draws);
  if (draws < 1 || draws > 1'000'000'000) {
    err << "reckonctl bench codec: --draws must be in [1, 1e9]\n";
    return kExitUsage;
  }
  const bool json = absl::GetFlag(FLAGS_json);
  const uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  const Distribution table[] = {
      {"U(0,1)", 0.000043, 1.39,
       [](std::mt19937_64& r) { return std::uniform_real_distribution<double>(0, 1)(r); }},
      {"N(0,1)", 0.0005, 2.46,
       [](std::mt19937_64& r) { return std::normal_distribution<double>(0, 1)(r); }},
      {"N(0,10^2)", 0.049, 2.49,
       [](std::mt19937_64& r) { return std::normal_distribution<double>(0, 10)(r); }},
      {"N(0,0.2^2)", 0.00002, 2.45,
       [](std::mt19937_64& r) { return std::normal_distribution<double>(0, 0.2)(r); }},
  };
  if (!json) {
    out << absl::StrFormat(
        "Dettmers 2015 Table 1, 8-bit dynamic tree: %d draws each, normalized by the abs max\n"
        "%-11s %15s %15s %15s %15s\n",
        draws, "", "mean abs err", "paper", "mean rel err %", "paper");
  }
  for (const Distribution& d : table) {
    const Errors e = Measure(d, draws, seed);
    if (json) {
      out << base::Json({{"distribution", d.name},
                         {"mean_abs_error", e.mean_abs},
                         {"mean_rel_error_pct", e.mean_rel_pct},
                         {"paper_mean_abs_error", d.mean_abs_paper},
                         {"paper_mean_rel_error_pct", d.mean_rel_pct_paper},
                         {"draws", draws}})
                 .dump()
          << "\n";
    } else {
      out << absl::StrFormat("%-11s %15.6g %15.6g %15.3f %15.2f\n", d.name, e.mean_abs,
                             d.mean_abs_paper, e.mean_rel_pct, d.mean_rel_pct_paper);
    }
  }
  if (!json) {
    // Any code of 256 values on U(0,1) has a mean absolute error of at
    // least 1 / (4 * 256) (equal cells of width 1/256, each value's error
    // averaging a quarter of its cell): the paper's U(0,1) figure is below it.
    out << absl::StrFormat(
        "bound: no 8-bit code does better than %.6f mean abs error on U(0,1) (1/1024)\n",
        1.0 / 1024);
  }
  return kExitOk;
}

}  // namespace reckon::ctl
