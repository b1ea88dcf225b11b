// cuBLAS is loaded on first use, not at process start (cuda/cublas_api.h).
// Needs the CUDA toolkit's libraries, not a GPU: it runs in CI.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "cuda/cublas_api.h"

namespace reckon::cuda {
namespace {

std::string MappedFiles() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream all;
  all << maps.rdbuf();
  return all.str();
}

TEST(CublasLoader, LoadsOnFirstUseOnly) {
  // Nothing of cuBLAS is mapped until something asks for it: a CPU worker
  // never pays for it.
  ASSERT_EQ(MappedFiles().find("libcublas"), std::string::npos) << MappedFiles();
  absl::StatusOr<const CublasApi*> api = Cublas();
  ASSERT_TRUE(api.ok()) << api.status().message();
  EXPECT_NE(MappedFiles().find("libcublas.so"), std::string::npos);
  // Loaded once: the same table every call.
  EXPECT_EQ(*Cublas(), *api);
  // The loaded library answers (no GPU needed for this) and names statuses.
  EXPECT_STREQ((*api)->status_name(CUBLAS_STATUS_NOT_INITIALIZED),
               "CUBLAS_STATUS_NOT_INITIALIZED");
}

TEST(CublasLoader, FailedCallsNameTheCallAndCublasWords) {
  EXPECT_TRUE(CublasStatus(CUBLAS_STATUS_SUCCESS, "x", "f.cc", 1).ok());
  const absl::Status s = CublasStatus(CUBLAS_STATUS_INVALID_VALUE, "sgemm(...)", "f.cc", 7);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("sgemm(...) failed at f.cc:7"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("CUBLAS_STATUS_INVALID_VALUE"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace reckon::cuda
