#include "ctl/worker_summary.h"

#include <chrono>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/process.h"
#include "base/status_macros.h"

namespace reckon::ctl {

absl::StatusOr<WorkerSummary> ReadWorkerSummary(const std::string& path) {
  WorkerSummary s;
  RECKON_ASSIGN_OR_RETURN(s.json, base::ReadJsonFile(path));
  RECKON_ASSIGN_OR_RETURN(s.weight_hash, base::JsonString(s.json, "weight_hash", path));
  const std::pair<const char*, double*> numbers[] = {{"steps", &s.steps},
                                                     {"samples", &s.samples},
                                                     {"train_seconds", &s.train_seconds},
                                                     {"samples_per_s", &s.samples_per_s},
                                                     {"test_accuracy", &s.test_accuracy},
                                                     {"wire_bytes", &s.wire_bytes},
                                                     {"dense_bytes", &s.dense_bytes},
                                                     {"compression_ratio", &s.compression_ratio}};
  for (const auto& [key, value] : numbers) {
    RECKON_ASSIGN_OR_RETURN(*value, base::JsonNumber(s.json, key, path));
  }
  return s;
}

std::string FindWorkerBinary() {
  const std::string dir = base::ExecutableDir();
  for (const std::string& candidate : {dir + "/../worker/reckon-worker", dir + "/reckon-worker"}) {
    if (std::filesystem::exists(candidate)) {
      return std::filesystem::weakly_canonical(candidate).string();
    }
  }
  return "";
}

absl::StatusOr<WorkerSummary> RunDenseBaseline(const std::string& worker_binary,
                                               const std::string& work_dir,
                                               const std::vector<std::string>& training_flags,
                                               int64_t timeout_s) {
  const std::string summary = work_dir + "/baseline.json";
  std::error_code ec;
  std::filesystem::remove(summary, ec);
  std::vector<std::string> args = {"--standalone", "--codec",       "dense",
                                   "--progress",   "off",           "--summary-json",
                                   summary,        "--http-listen", ""};
  for (const std::string& f : training_flags) {
    if (f.rfind("--fault", 0) != 0) args.push_back(f);
  }
  const std::string err_path = work_dir + "/baseline.err";
  RECKON_ASSIGN_OR_RETURN(
      base::ChildProcess p,
      base::ChildProcess::Spawn(worker_binary, args, work_dir + "/baseline.log", err_path));
  std::optional<int> code = p.Wait(std::chrono::seconds(timeout_s));
  if (!code || *code != 0) {
    absl::StatusOr<std::string> err = base::ReadFile(err_path, 1 << 20);
    std::string text = err.ok() ? *err : "";
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return absl::UnavailableError(
        absl::StrCat("the baseline worker failed: ", text.substr(0, 2000)));
  }
  return ReadWorkerSummary(summary);
}

}  // namespace reckon::ctl
