// The GPU tests' first line: a test that needs a GPU skips, saying why
// (the device probe's words: no driver, no device), where there is none.
#ifndef RECKON_TESTS_GPU_SKIP_H_
#define RECKON_TESTS_GPU_SKIP_H_

#include <gtest/gtest.h>

#include "cuda/device.h"

#define SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                       \
    const absl::StatusOr<::reckon::cuda::DeviceInfo> device = ::reckon::cuda::ProbeDevice(); \
    if (!device.ok()) GTEST_SKIP() << "no GPU here: " << device.status().message();          \
  } while (0)

#endif  // RECKON_TESTS_GPU_SKIP_H_
