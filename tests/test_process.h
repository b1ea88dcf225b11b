// Helpers for tests that drive real binaries and files: a scratch directory
// per test, whole-file reads, and running a program to its end as a separate
// process (base/process.h).
#ifndef RECKON_TESTS_TEST_PROCESS_H_
#define RECKON_TESTS_TEST_PROCESS_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/files.h"
#include "base/process.h"

namespace reckon::testing {

// A fresh directory named after the running test; removed by ~ScratchDir.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("reckon_") + info->test_suite_name() + "_" + info->name() +
                       "_" + std::to_string(::getpid());
    std::replace(name.begin(), name.end(), '/', '_');  // parameterized test names
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The whole file; empty when it is missing or unreadable.
inline std::string ReadWholeFile(const std::filesystem::path& p) {
  absl::StatusOr<std::string> text = base::ReadFile(p.string(), size_t{1} << 30);
  return text.ok() ? *text : "";
}

struct ProcessResult {
  int exit_code;  // 128 + signal when killed; -1 when it could not start
  std::string out, err;
};

// Runs `binary` with `args`, stdout and stderr captured through files in
// `scratch`; waits for it to exit (killed after ten minutes).
inline ProcessResult RunProcess(const std::string& binary, std::vector<std::string> args,
                                const std::filesystem::path& scratch) {
  const std::filesystem::path out = scratch / "stdout", err = scratch / "stderr";
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  absl::StatusOr<base::ChildProcess> child =
      base::ChildProcess::Spawn(binary, args, out.string(), err.string());
  if (!child.ok()) return {-1, "", std::string(child.status().message())};
  const std::optional<int> code = child->Wait(std::chrono::minutes(10));
  return {code.value_or(128 + 9), ReadWholeFile(out), ReadWholeFile(err)};
}

}  // namespace reckon::testing

#endif  // RECKON_TESTS_TEST_PROCESS_H_
