#include <sys/types.h>
#include <time.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/update_message.h"
#include "codec/weight_checksum.h"
#include "ctl/bench_inbound.h"
#include "server/cluster_config.h"

namespace reckon::ctl::inbound {

v1::ClusterFingerprint Fingerprint(uint64_t params) {
  server::ClusterSpec spec;
  spec.model = "bench-inbound";
  spec.param_count = params;
  spec.fraction_bits = kFractionBits;
  spec.seed = kSeed;
  return server::MakeFingerprint(spec);
}

// `count` Update frames of `origin`, seqs 1..count, each `updates` distinct
// random indices with random signs, Rice-coded, with their checksum
// contribution (what every receiver checks).
std::vector<v1::GossipFrame> MakeMessages(const std::string& origin, const Size& size, int count,
                                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(size.params - 1));
  const codec::WeightChecksum checksum(kSeed);
  constexpr int64_t kStepQuanta = int64_t{1} << 20;
  std::vector<v1::GossipFrame> frames(count);
  for (int m = 0; m < count; ++m) {
    std::set<uint32_t> indices;
    while (indices.size() < size.updates) indices.insert(pick(rng));
    std::vector<uint32_t> words;
    words.reserve(indices.size());
    for (uint32_t index : indices) words.push_back(index | (rng() & 1 ? 0x80000000u : 0));
    v1::Update* u = frames[m].mutable_update();
    u->mutable_origin()->set_node_id(origin);
    u->mutable_origin()->set_incarnation(1);
    u->set_seq(m + 1);
    (void)codec::EncodeThresholdUpdate(words, kStepQuanta, size.params, v1::CODEC_THRESHOLD_RICE,
                                       u);
    u->set_checksum_delta(checksum.OfUpdate(kStepQuanta, words));
  }
  return frames;
}

// CPU time the threads of this process whose names start with `prefix` have
// run, in ns: 0 when there are none. Read from each thread's CPU clock
// (Linux's per-thread clock id of a tid, as pthread_getcpuclockid makes
// it), which counts the slice a running thread is in; schedstat's figure
// does not until its next tick or switch, and a node thread that took a few
// messages in under a tick read 0 ms a message (CI, 2026-11-30).
uint64_t ThreadCpuNs(const std::string& prefix) {
  uint64_t total = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    std::getline(comm, line);
    if (line.rfind(prefix, 0) != 0) continue;
    const pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    // CPUCLOCK_PERTHREAD (4) | CPUCLOCK_SCHED (2), the tid inverted above.
    const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
    timespec t{};
    if (clock_gettime(clock, &t) != 0) continue;  // the thread has ended
    total += uint64_t(t.tv_sec) * 1'000'000'000u + uint64_t(t.tv_nsec);
  }
  return total;
}

double OwnCpuNs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e9 + double(t.tv_nsec);
}

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

absl::StatusOr<Receiver> StartReceiver(server::NodeOptions o, std::span<const int64_t> initial,
                                       int origins) {
  Receiver r;
  int port = 0;
  RECKON_ASSIGN_OR_RETURN(r.server, server::GossipServer::Start("127.0.0.1:0", {}, &port));
  o.listen_address = absl::StrCat("127.0.0.1:", port);
  o.failure_timeout = std::chrono::seconds(120);  // origins send no heartbeats
  RECKON_ASSIGN_OR_RETURN(r.node, server::GossipNode::Create(o, initial, kFractionBits));
  r.server->SetNode(&r.node->service());
  r.node->Start(r.server->MakeDialer(&r.node->service()));
  for (int i = 0; i < origins; ++i) {
    r.origins.push_back(
        std::make_unique<Origin>(o.listen_address, absl::StrCat("o", i), o.fingerprint));
    if (!r.origins.back()->answered()) {
      return absl::UnavailableError(absl::StrCat("origin ", i, " got no Hello back"));
    }
  }
  return r;
}

}  // namespace reckon::ctl::inbound
