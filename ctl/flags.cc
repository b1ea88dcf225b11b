#include "ctl/flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(bool, json, false, "print JSON instead of a table");
ABSL_FLAG(int64_t, steps, 200, "timed training steps");
ABSL_FLAG(double, threshold, 0, "tau, rounded to the fixed-point grid");
