#include "ctl/worker_summary.h"

#include <filesystem>

#include "base/process.h"
#include "base/status_macros.h"

namespace reckon::ctl {

absl::StatusOr<WorkerSummary> ReadWorkerSummary(const std::string& path) {
  WorkerSummary s;
  RECKON_ASSIGN_OR_RETURN(s.json, base::ReadJsonFile(path));
  RECKON_ASSIGN_OR_RETURN(s.weight_hash, base::JsonString(s.json, "weight_hash", path));
  const std::pair<const char*, double*> numbers[] = {
      {"steps", &s.steps},
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

}  // namespace reckon::ctl
