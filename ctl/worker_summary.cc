#include "ctl/worker_summary.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/process.h"
#include "base/status_macros.h"

namespace reckon::ctl {

double SamplesPerSecondTogether(const std::vector<WorkerSummary>& workers) {
  double samples = 0, slowest_train_s = 0;
  for (const WorkerSummary& w : workers) {
    samples += w.samples;
    slowest_train_s = std::max(slowest_train_s, w.train_seconds);
  }
  return slowest_train_s > 0 ? samples / slowest_train_s : 0;
}

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

namespace {

// A worker trained alone: `args` (--standalone and its own flags), then
// `training_flags` without --fault-*; logs to work_dir/<name>.{log,err},
// summary to work_dir/<name>.json.
struct AloneWorker {
  std::string name, summary, err_path;
  std::optional<base::ChildProcess> process;
};

absl::StatusOr<AloneWorker> SpawnAlone(const std::string& worker_binary,
                                       const std::string& work_dir, const std::string& name,
                                       std::vector<std::string> args,
                                       const std::vector<std::string>& training_flags) {
  AloneWorker w;
  w.name = name;
  w.summary = work_dir + "/" + name + ".json";
  w.err_path = work_dir + "/" + name + ".err";
  std::error_code ec;
  std::filesystem::remove(w.summary, ec);
  args.insert(args.end(), {"--progress", "off", "--summary-json", w.summary, "--http-listen", ""});
  for (const std::string& f : training_flags) {
    if (f.rfind("--fault", 0) != 0) args.push_back(f);
  }
  RECKON_ASSIGN_OR_RETURN(
      base::ChildProcess p,
      base::ChildProcess::Spawn(worker_binary, args, work_dir + "/" + name + ".log", w.err_path));
  w.process.emplace(std::move(p));
  return w;
}

// Waits for it until `deadline` and reads its summary; kUnavailable with
// its stderr when it fails or runs past the deadline (it is then killed).
absl::StatusOr<WorkerSummary> FinishAlone(AloneWorker& w,
                                          std::chrono::steady_clock::time_point deadline) {
  const auto left = std::max(std::chrono::steady_clock::duration::zero(),
                             deadline - std::chrono::steady_clock::now());
  std::optional<int> code =
      w.process->Wait(std::chrono::duration_cast<std::chrono::milliseconds>(left));
  if (!code || *code != 0) {
    if (!code) w.process.reset();  // killed and reaped
    absl::StatusOr<std::string> err = base::ReadFile(w.err_path, 1 << 20);
    std::string text = err.ok() ? *err : "";
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return absl::UnavailableError(
        absl::StrCat(w.name, code ? " failed: " : " ran past the timeout: ", text.substr(0, 2000)));
  }
  return ReadWorkerSummary(w.summary);
}

}  // namespace

absl::StatusOr<WorkerSummary> RunDenseBaseline(const std::string& worker_binary,
                                               const std::string& work_dir,
                                               const std::vector<std::string>& training_flags,
                                               int64_t timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  RECKON_ASSIGN_OR_RETURN(AloneWorker w,
                          SpawnAlone(worker_binary, work_dir, "baseline",
                                     {"--standalone", "--codec", "dense"}, training_flags));
  absl::StatusOr<WorkerSummary> s = FinishAlone(w, deadline);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("the ", s.status().message()));
  return s;
}

absl::StatusOr<std::vector<WorkerSummary>> RunShardsAlone(
    const std::string& worker_binary, const std::string& work_dir,
    const std::vector<std::string>& training_flags, int workers, int threads, int64_t timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  std::vector<AloneWorker> running;
  for (int i = 0; i < workers; ++i) {
    absl::StatusOr<AloneWorker> w =
        SpawnAlone(worker_binary, work_dir, absl::StrCat("alone-w", i),
                   {"--standalone", "--shard", absl::StrCat(i, "/", workers), "--threads",
                    absl::StrCat(threads)},
                   training_flags);
    if (!w.ok()) return w.status();  // the ones running are killed with `running`
    running.push_back(*std::move(w));
  }
  std::vector<WorkerSummary> summaries;
  absl::Status first_error;
  for (AloneWorker& w : running) {
    absl::StatusOr<WorkerSummary> s = FinishAlone(w, deadline);
    if (s.ok()) {
      summaries.push_back(*std::move(s));
    } else if (first_error.ok()) {
      first_error = s.status();
    }
  }
  if (!first_error.ok()) return first_error;
  return summaries;
}

}  // namespace reckon::ctl
