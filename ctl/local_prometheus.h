// `reckonctl local --prometheus`: a real Prometheus (/usr/bin/prometheus)
// scraping the local cluster's workers with the project's dashboards/ files.
//
// Threads: a function, any thread. Errors: no dashboards/ found is
// kNotFound; a file that cannot be copied or written is kUnavailable or its
// own error; a Prometheus that cannot start is base::ChildProcess's error.
#ifndef RECKON_CTL_LOCAL_PROMETHEUS_H_
#define RECKON_CTL_LOCAL_PROMETHEUS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/process.h"

namespace reckon::ctl {

// Starts Prometheus listening on `listen`, with dashboards/prometheus.yml
// and alerts.yml (from `dashboards_dir`, or found beside the binary when it
// is empty) copied under work_dir/prometheus, `targets` (host:port of each
// worker's HTTP endpoint) as its file targets, and the console page.
absl::StatusOr<base::ChildProcess> StartPrometheus(const std::string& dashboards_dir,
                                                   const std::string& work_dir,
                                                   const std::string& listen,
                                                   const std::vector<std::string>& targets);

}  // namespace reckon::ctl

#endif  // RECKON_CTL_LOCAL_PROMETHEUS_H_
