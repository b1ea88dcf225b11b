// reckonctl local --prometheus: a real Prometheus scraping the workers.
#include "ctl/local_prometheus.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/json.h"
#include "base/status_macros.h"

namespace reckon::ctl {

namespace {

// The dashboards/ directory: --dashboards, or the source tree's beside the
// build (build/ctl/reckonctl -> dashboards/); empty when there is none.
std::string FindDashboards(const std::string& given) {
  namespace fs = std::filesystem;
  if (!given.empty()) return given;
  for (const char* up : {"/../../dashboards", "/../dashboards", "/../share/reckon/dashboards"}) {
    const std::string candidate = base::ExecutableDir() + up;
    if (fs::exists(candidate + "/prometheus.yml")) return fs::weakly_canonical(candidate).string();
  }
  return "";
}

}  // namespace

// Starts Prometheus on the workers' HTTP ports with dashboards/prometheus.yml
// and alerts.yml (copied into the work dir, the workers as file targets)
// and the console page.
absl::StatusOr<base::ChildProcess> StartPrometheus(const std::string& dashboards_dir,
                                                   const std::string& work_dir,
                                                   const std::string& listen,
                                                   const std::vector<std::string>& targets) {
  namespace fs = std::filesystem;
  const std::string dashboards = FindDashboards(dashboards_dir);
  if (dashboards.empty()) {
    return absl::NotFoundError("cannot find dashboards/ (give --dashboards DIR)");
  }
  const fs::path dir = fs::path(work_dir) / "prometheus";
  std::error_code ec;
  fs::create_directories(dir / "targets", ec);
  fs::create_directories(dir / "libraries", ec);
  for (const char* file : {"prometheus.yml", "alerts.yml"}) {
    fs::copy_file(fs::path(dashboards) / file, dir / file, fs::copy_options::overwrite_existing,
                  ec);
    if (ec) return absl::UnavailableError(absl::StrCat("copying ", file, ": ", ec.message()));
  }
  base::Json target_list = base::Json::array();
  for (const std::string& t : targets) target_list.push_back(t);
  RECKON_RETURN_IF_ERROR(
      base::WriteFileAtomically((dir / "targets" / "reckon.json").string(),
                                base::Json::array({{{"targets", target_list}}}).dump(2) + "\n"));
  return base::ChildProcess::Spawn(
      "/usr/bin/prometheus",
      {"--config.file=" + (dir / "prometheus.yml").string(),
       "--storage.tsdb.path=" + (dir / "data").string(), "--web.listen-address=" + listen,
       "--web.console.templates=" + dashboards + "/consoles",
       "--web.console.libraries=" + (dir / "libraries").string()},
      (dir / "prometheus.log").string(), (dir / "prometheus.log").string());
}

}  // namespace reckon::ctl
