// The density argument of the Rice bench programs (rice_chains.cc,
// rice_streams.cc): the share of a Strom-sized model's parameters that send
// an update. Their generator draws in millionths, so 1e-6 is the least
// density that makes a message; 1 is every parameter. Anything else, or
// more than one argument, is refused by name with exit 2 before any work.
// Held by tests/bench/density_arg_test.py.
#ifndef RECKON_TESTS_BENCH_DENSITY_ARG_H_
#define RECKON_TESTS_BENCH_DENSITY_ARG_H_

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace reckon::bench {

inline constexpr double kLeastDensity = 1e-6;

// argv[1] as a density, or `fallback` without one.
inline double DensityArg(int argc, char** argv, double fallback) {
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [density, from %g to 1; %g without]\n", argv[0], kLeastDensity,
                 fallback);
    std::exit(2);
  }
  if (argc < 2) return fallback;
  char* end = nullptr;
  errno = 0;
  const double density = std::strtod(argv[1], &end);
  if (end == argv[1] || *end != '\0' || errno != 0 || !(density >= kLeastDensity && density <= 1)) {
    std::fprintf(stderr, "%s: density '%s': a number from %g to 1\n", argv[0], argv[1],
                 kLeastDensity);
    std::exit(2);
  }
  return density;
}

}  // namespace reckon::bench

#endif  // RECKON_TESTS_BENCH_DENSITY_ARG_H_
