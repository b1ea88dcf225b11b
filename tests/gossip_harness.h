// Several reckon-worker processes on loopback, as the multi-process gossip
// tests drive them: start, signal, wait, read status and summaries.
#ifndef RECKON_TESTS_GOSSIP_HARNESS_H_
#define RECKON_TESTS_GOSSIP_HARNESS_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json.h"
#include "base/process.h"
#include "server/grpc_clients.h"
#include "server/grpc_transport.h"
#include "tests/test_process.h"

namespace reckon::testing {

using base::ChildProcess;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The flags every worker of the small test cluster gets: 784-128-10, one
// thread, fast heartbeats and failure detection.
inline std::vector<std::string> SmallClusterFlags() {
  return {"--layers",
          "784,128,10",
          "--threads",
          "1",
          "--epochs",
          "1",
          "--eval-samples",
          "2000",
          "--heartbeat-ms",
          "50",
          "--failure-timeout-ms",
          "1500",
          "--quiesce-timeout-s",
          "120",
          "--progress",
          "off"};
}

// A summary (worker/summary.h) parsed; an empty object when it does not
// parse, so every lookup below fails visibly.
inline base::Json ParseSummary(const std::string& json) {
  absl::StatusOr<base::Json> parsed = base::ParseJson(json, "summary");
  return parsed.ok() && parsed->is_object() ? *parsed : base::Json::object();
}
// Member `key`: a string's contents, anything else as JSON text ("true",
// "{...}"); empty when absent.
inline std::string Field(const std::string& json, const std::string& key) {
  const base::Json j = ParseSummary(json);
  if (!j.contains(key)) return "";
  const base::Json& v = j.at(key);
  return v.is_string() ? v.get<std::string>() : v.dump();
}
// Member `key` as a number; NaN (which every comparison fails) when absent
// or not a number.
inline double Number(const std::string& json, const std::string& key) {
  absl::StatusOr<double> n = base::JsonNumber(ParseSummary(json), key, "summary");
  return n.ok() ? *n : std::nan("");
}
// A counter of the node: members of the summary's "node" object.
inline double Counter(const std::string& json, const std::string& name) {
  const base::Json j = ParseSummary(json);
  if (!j.contains("node")) return std::nan("");
  absl::StatusOr<double> n = base::JsonNumber(j.at("node"), name, "summary node");
  return n.ok() ? *n : std::nan("");
}
// The summary's version vector: {"w0#123": 40, ...}.
inline std::map<std::string, uint64_t> Versions(const std::string& json) {
  std::map<std::string, uint64_t> out;
  const base::Json j = ParseSummary(json);
  if (!j.contains("version_vector") || !j.at("version_vector").is_object()) return out;
  for (const auto& [origin, seq] : j.at("version_vector").items()) {
    if (seq.is_number_unsigned()) out[origin] = seq.get<uint64_t>();
  }
  return out;
}
// The messages of node `node_id` (every incarnation) in the summary's vector.
inline uint64_t VersionOf(const std::string& json, const std::string& node_id) {
  uint64_t total = 0;
  for (const auto& [origin, seq] : Versions(json)) {
    if (origin.substr(0, origin.find('#')) == node_id) total += seq;
  }
  return total;
}

class Cluster {
 public:
  // `flags`: what every worker gets besides its identity, peers, shard and
  // summary path.
  explicit Cluster(int slots, std::vector<std::string> flags = SmallClusterFlags())
      : flags_(std::move(flags)), ports_(*base::FreeLoopbackPorts(slots)) {
    for (int p : ports_) addresses_.push_back(absl::StrCat("127.0.0.1:", p));
  }

  // Worker i listens at `address` and runs under `exec_prefix` (e.g. `ip
  // netns exec <ns>`: ctl/net_lab.h). Call before Start.
  void Place(int i, const std::string& address, std::vector<std::string> exec_prefix) {
    addresses_[i] = address;
    exec_prefix_[i] = std::move(exec_prefix);
  }
  std::string address(int i) const { return addresses_[i]; }
  // Status queries of a TLS cluster present this certificate.
  void SetStatusTls(server::TlsConfig tls) { status_tls_ = std::move(tls); }
  std::string peers() const { return absl::StrJoin(addresses_, ","); }
  std::string summary_path(int i) const { return (dir_ / absl::StrCat("w", i, ".json")).string(); }
  std::string err_path(int i) const { return (dir_ / absl::StrCat("w", i, ".err")).string(); }

  // Starts worker i (node id w<i>, shard i/shards) with the common flags.
  void Start(int i, int shards, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--node-id", absl::StrCat("w", i), "--listen", addresses_[i],
                                     "--peers", peers(), "--shard", absl::StrCat(i, "/", shards),
                                     "--summary-json", summary_path(i),
                                     // Any free port: tests run side by side.
                                     "--http-listen", "127.0.0.1:0"};
    args.insert(args.end(), flags_.begin(), flags_.end());
    args.insert(args.end(), extra.begin(), extra.end());
    std::filesystem::remove(summary_path(i));
    std::string binary = RECKON_WORKER_PATH;
    if (auto prefix = exec_prefix_.find(i); prefix != exec_prefix_.end()) {
      args.insert(args.begin(), binary);
      args.insert(args.begin(), prefix->second.begin() + 1, prefix->second.end());
      binary = prefix->second.front();
    }
    absl::StatusOr<ChildProcess> p = ChildProcess::Spawn(
        binary, args, (dir_ / absl::StrCat("w", i, ".log")).string(), err_path(i));
    ASSERT_TRUE(p.ok()) << p.status();
    processes_[i].emplace(*std::move(p));
  }

  int Wait(int i, seconds timeout = seconds(180)) {
    std::optional<int> code = processes_[i]->Wait(timeout);
    return code ? *code : -1;
  }
  ChildProcess& process(int i) { return *processes_[i]; }

  std::string Summary(int i) const { return ReadWholeFile(summary_path(i)); }
  std::string Err(int i) const { return ReadWholeFile(err_path(i)); }
  std::string Out(int i) const { return ReadWholeFile(dir_ / absl::StrCat("w", i, ".log")); }
  // Every started worker's stderr, each under its name: a failure of one
  // often starts in another's log.
  std::string Logs() const {
    std::string all;
    for (const auto& [i, process] : processes_) {
      if (process) absl::StrAppend(&all, "--- w", i, ":\n", Err(i));
    }
    return all;
  }

  // The port of worker i's HTTP endpoint, from its log (0 when it has not
  // said within `timeout`).
  int HttpPort(int i, seconds timeout = seconds(30)) const {
    const std::string marker = "HTTP on 127.0.0.1:";
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string log = Out(i);
      if (const size_t at = log.find(marker); at != std::string::npos) {
        return std::atoi(log.c_str() + at + marker.size());
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return 0;
  }

  // Waits until worker i's stdout holds `text` (false after `timeout`).
  bool WaitForOutput(int i, const std::string& text, seconds timeout = seconds(60)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Out(i).find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
  }

  // The node's status; none while it is not answering.
  std::optional<v1::NodeStatus> Status(int i) {
    absl::StatusOr<v1::NodeStatus> s =
        server::FetchStatus(addresses_[i], milliseconds(500), status_tls_);
    return s.ok() ? std::optional<v1::NodeStatus>(*s) : std::nullopt;
  }
  // Waits until worker i has taken at least `steps` steps.
  bool WaitForSteps(int i, uint64_t steps, seconds timeout = seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      std::optional<v1::NodeStatus> s = Status(i);
      if (s && s->local_steps() >= steps) return true;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return false;
  }

  // Every listed worker exited 0 with the same weight hash and version vector.
  void ExpectIdentical(const std::vector<int>& workers) {
    const std::string first = Summary(workers[0]);
    ASSERT_FALSE(first.empty()) << Err(workers[0]);
    for (int i : workers) {
      const std::string s = Summary(i);
      ASSERT_FALSE(s.empty()) << "w" << i << ": " << Err(i);
      EXPECT_EQ(Field(s, "weight_hash"), Field(first, "weight_hash")) << "w" << i;
      EXPECT_EQ(Versions(s), Versions(first)) << "w" << i;
    }
  }

 private:
  ScratchDir dir_;
  std::vector<std::string> flags_;
  std::vector<int> ports_;
  std::vector<std::string> addresses_;
  std::map<int, std::vector<std::string>> exec_prefix_;
  server::TlsConfig status_tls_;
  std::map<int, std::optional<ChildProcess>> processes_;
};

}  // namespace reckon::testing

#endif  // RECKON_TESTS_GOSSIP_HARNESS_H_
