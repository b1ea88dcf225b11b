// Monitoring end to end: real reckon-worker processes with their HTTP
// endpoints, and a real Prometheus (Debian's `prometheus`) scraping them
// with dashboards/prometheus.yml and alerts.yml. Every panel's PromQL in
// dashboards/reckon.json must return data, every alert rule must load,
// `promtool check metrics` must accept every worker's /metrics, and the
// console page Prometheus serves must show the workers. Also /readyz and
// /healthz through a join and a dead peer.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/json.h"
#include "tests/gossip_harness.h"
#include "tests/http_client.h"

namespace reckon::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kDashboards = fs::path(RECKON_SOURCE_DIR) / "dashboards";

// Every worker trains far longer than the test watches; SIGTERM ends them.
std::vector<std::string> LongRunFlags() {
  std::vector<std::string> flags = SmallClusterFlags();
  for (size_t i = 0; i + 1 < flags.size(); ++i) {
    if (flags[i] == "--epochs") flags[i + 1] = "100000";
    if (flags[i] == "--eval-samples") flags[i + 1] = "500";
  }
  flags.insert(flags.end(), {"--layers", "784,32,10"});
  return flags;
}

bool HaveTool(const std::string& tool) {
  return std::system(("command -v " + tool + " > /dev/null 2>&1").c_str()) == 0;
}

// Runs a shell command; its exit code and output.
ProcessResult Shell(const std::string& command, const fs::path& scratch) {
  return RunProcess("/bin/sh", {"-c", command}, scratch);
}

// A Prometheus query through the HTTP API; the "result" array.
absl::StatusOr<base::Json> Query(int port, const std::string& expr) {
  const HttpResult r = HttpGet(port, "/api/v1/query?query=" + UrlEncode(expr));
  if (r.status != 200) {
    return absl::UnavailableError(absl::StrCat("HTTP ", r.status, ": ", r.body.substr(0, 300)));
  }
  absl::StatusOr<base::Json> json = base::ParseJson(r.body, "query answer");
  if (!json.ok()) return json.status();
  return json->at("data").at("result");
}

// Whether a result holds at least one finite value.
bool HasFiniteValue(const base::Json& result) {
  for (const base::Json& series : result) {
    const std::string v = series.at("value")[1].get<std::string>();
    if (std::isfinite(std::strtod(v.c_str(), nullptr))) return true;
  }
  return false;
}

class Monitoring : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* tool : {"prometheus", "promtool"}) {
      ASSERT_TRUE(HaveTool(tool)) << tool << " is missing: ./deploy/install-deps.sh installs "
                                  << "Debian's prometheus package";
    }
  }
};

TEST_F(Monitoring, RealPrometheusScrapesEveryPanelAndRule) {
  Cluster c(3, LongRunFlags());
  for (int i = 0; i < 3; ++i) c.Start(i, 3, {});
  std::vector<int> http;
  for (int i = 0; i < 3; ++i) {
    http.push_back(c.HttpPort(i));
    ASSERT_GT(http.back(), 0) << c.Out(i) << c.Err(i);
  }
  ASSERT_TRUE(c.WaitForSteps(0, 50));

  // The exposition of every worker passes promtool's checks.
  ScratchDir dir;
  for (int i = 0; i < 3; ++i) {
    const HttpResult metrics = HttpGet(http[i], "/metrics");
    ASSERT_EQ(metrics.status, 200);
    EXPECT_NE(metrics.body.find(absl::StrCat("reckon_peer_up{node=\"w", i, "\"")),
              std::string::npos) << metrics.body;
    const fs::path file = dir / absl::StrCat("w", i, ".prom");
    std::ofstream(file) << metrics.body;
    const ProcessResult check = Shell("promtool check metrics < " + file.string(), dir.path());
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  }

  // Prometheus with the shipped configuration, the workers as file targets.
  const fs::path prom = dir / "prometheus";
  fs::create_directories(prom / "targets");
  fs::copy_file(kDashboards / "prometheus.yml", prom / "prometheus.yml");
  fs::copy_file(kDashboards / "alerts.yml", prom / "alerts.yml");
  std::vector<std::string> targets;
  for (int p : http) targets.push_back(absl::StrCat("\"127.0.0.1:", p, "\""));
  std::ofstream(prom / "targets" / "reckon.json")
      << "[{\"targets\": [" << absl::StrJoin(targets, ", ") << "]}]\n";
  const ProcessResult config =
      Shell("promtool check config " + (prom / "prometheus.yml").string(), dir.path());
  ASSERT_EQ(config.exit_code, 0) << config.out << config.err;
  const int port = (*base::FreeLoopbackPorts(1))[0];
  fs::create_directories(prom / "libraries");
  absl::StatusOr<base::ChildProcess> server = base::ChildProcess::Spawn(
      "/usr/bin/prometheus",
      {"--config.file=" + (prom / "prometheus.yml").string(),
       "--storage.tsdb.path=" + (prom / "data").string(),
       absl::StrCat("--web.listen-address=127.0.0.1:", port),
       "--web.console.templates=" + (kDashboards / "consoles").string(),
       "--web.console.libraries=" + (prom / "libraries").string()},
      (prom / "out.log").string(), (prom / "err.log").string());
  ASSERT_TRUE(server.ok()) << server.status();

  // Every target up, then enough scrapes (5 s apart) for rates over 30 s.
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  size_t up = 0;
  while (up < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(500));
    absl::StatusOr<base::Json> r = Query(port, "up{job=\"reckon\"} == 1");
    up = r.ok() ? r->size() : 0;
  }
  ASSERT_EQ(up, 3u) << ReadWholeFile(prom / "err.log");
  std::this_thread::sleep_for(seconds(22));

  // Every panel's every expression returns data.
  absl::StatusOr<base::Json> dashboard = base::ReadJsonFile((kDashboards / "reckon.json").string());
  ASSERT_TRUE(dashboard.ok()) << dashboard.status();
  int expressions = 0;
  for (const base::Json& panel : dashboard->at("panels")) {
    for (const base::Json& target : panel.at("targets")) {
      const std::string expr = absl::StrReplaceAll(
          target.at("expr").get<std::string>(), {{"$node", ".*"}, {"$__rate_interval", "30s"}});
      absl::StatusOr<base::Json> result = Query(port, expr);
      ASSERT_TRUE(result.ok()) << panel.at("title") << ": " << expr << ": " << result.status();
      EXPECT_TRUE(HasFiniteValue(*result))
          << "panel " << panel.at("title") << " has no data: " << expr << " -> " << result->dump();
      ++expressions;
    }
  }
  EXPECT_GE(expressions, 30);

  // Every alert rule is loaded and evaluates without error.
  const HttpResult rules = HttpGet(port, "/api/v1/rules");
  ASSERT_EQ(rules.status, 200) << rules.body;
  absl::StatusOr<base::Json> parsed = base::ParseJson(rules.body, "rules");
  ASSERT_TRUE(parsed.ok());
  int loaded = 0;
  for (const base::Json& group : parsed->at("data").at("groups")) {
    for (const base::Json& rule : group.at("rules")) {
      EXPECT_EQ(rule.at("health"), "ok") << rule.dump();
      ++loaded;
    }
  }
  // As many as alerts.yml defines (one `- alert:` line each).
  int defined = 0;
  std::ifstream alerts(kDashboards / "alerts.yml");
  for (std::string line; std::getline(alerts, line);) {
    if (line.find("- alert:") != std::string::npos) ++defined;
  }
  EXPECT_GE(defined, 8);
  EXPECT_EQ(loaded, defined);

  // The console page, rendered by Prometheus, shows every worker.
  const HttpResult console = HttpGet(port, "/consoles/reckon.html");
  ASSERT_EQ(console.status, 200) << console.body.substr(0, 2000);
  EXPECT_NE(console.body.find("Workers up: <b>3</b>"), std::string::npos) << console.body;
  for (const char* node : {"<td>w0</td>", "<td>w1</td>", "<td>w2</td>"}) {
    EXPECT_NE(console.body.find(node), std::string::npos) << console.body;
  }
  EXPECT_EQ(console.body.find("no reckon_steps_total series"), std::string::npos);

  server->Signal(SIGTERM);
  server->Wait(seconds(20));
  // Stopped while training: exit 3 (stopped before the run was done).
  for (int i = 0; i < 3; ++i) c.process(i).Signal(SIGTERM);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.process(i).Wait(seconds(60)), 3) << c.Err(i);
}

TEST_F(Monitoring, ReadyOnlyOnceJoinedAndHealthyWhilePeersAreDown) {
  Cluster c(2, LongRunFlags());
  // w1 alone: its seed w0 does not answer, so it cannot know whether the
  // cluster has trained, and keeps probing: alive, not ready.
  c.Start(1, 2, {});
  const int w1 = c.HttpPort(1);
  ASSERT_GT(w1, 0) << c.Out(1) << c.Err(1);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(HttpGet(w1, "/healthz").status, 200);
    const HttpResult ready = HttpGet(w1, "/readyz");
    EXPECT_EQ(ready.status, 503) << ready.body;
    EXPECT_NE(ready.body.find("joining"), std::string::npos) << ready.body;
    std::this_thread::sleep_for(milliseconds(200));
  }
  // w0 comes: both learn nobody trained, start fresh, and are ready.
  c.Start(0, 2, {});
  const int w0 = c.HttpPort(0);
  ASSERT_GT(w0, 0);
  for (int port : {w0, w1}) {
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + seconds(30);
    while (status != 200 && std::chrono::steady_clock::now() < deadline) {
      status = HttpGet(port, "/readyz").status;
      std::this_thread::sleep_for(milliseconds(100));
    }
    EXPECT_EQ(status, 200);
  }
  const HttpResult status = HttpGet(w1, "/status");
  ASSERT_EQ(status.status, 200);
  absl::StatusOr<base::Json> json = base::ParseJson(status.body, "/status");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->at("node_id"), "w1");
  EXPECT_EQ(json->at("joined"), true);
  // w0 dies: w1's health does not depend on its peers.
  c.process(0).Signal(SIGKILL);
  ASSERT_TRUE(c.process(0).Wait(seconds(10)).has_value());
  for (int i = 0; i < 20; ++i) {  // past the 1.5 s failure timeout
    EXPECT_EQ(HttpGet(w1, "/healthz").status, 200);
    std::this_thread::sleep_for(milliseconds(150));
  }
  const HttpResult metrics = HttpGet(w1, "/metrics");
  EXPECT_NE(metrics.body.find("reckon_peer_up{node=\"w1\",peer=\"w0\"} 0"), std::string::npos)
      << metrics.body;
  c.process(1).Signal(SIGTERM);
  EXPECT_EQ(c.process(1).Wait(seconds(60)), 3) << c.Err(1);  // stopped while training
}

}  // namespace
}  // namespace reckon::testing
