// A network for fault tests: one network namespace per worker, joined by a
// switch that runs in the test process and impairs packets the way a bad
// link does (loss, duplication, delay with jitter, hence reordering) or cuts
// the network into groups (partitions).
//
// Why not netem: the kernels of these machines are built without
// CONFIG_NET_SCH_NETEM (`tc qdisc add ... netem` answers "Specified qdisc
// kind is unknown"), nor prio/fq; TUN is there. So each namespace gets a TUN
// device with its address, and every IPv4 packet any worker sends is read by
// the switch, which decides its fate and writes it, possibly later, possibly
// twice, into the destination's TUN. Workers see a real IP network: real TCP
// with retransmissions, real gRPC over it.
//
// The test process itself reaches the workers (status queries) through a
// TUN of its own, 10.213.N.254; its packets are never impaired and pass
// partitions, so watching does not disturb.
//
// Cleanup: the TUN devices vanish with the switch's file descriptors; the
// namespaces are deleted by the destructor, and any left by a test process
// that was killed (names carry its pid) are deleted by the next NetLab.
//
// Needs root, `ip` (iproute2) and /dev/net/tun: Available() says why not.
#ifndef RECKON_TESTS_NET_LAB_H_
#define RECKON_TESTS_NET_LAB_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace reckon::testing {

// What happens to each packet between two workers.
struct LinkShape {
  double loss = 0;       // probability a packet is dropped
  double duplicate = 0;  // probability it is delivered twice
  std::chrono::milliseconds delay{0};
  std::chrono::milliseconds jitter{0};  // delay is uniform in delay +- jitter
};

class NetLab {
 public:
  // OK, or why this machine cannot run it (not root, no TUN, no `ip`).
  static absl::Status Available();
  static absl::StatusOr<std::unique_ptr<NetLab>> Create(int workers);
  ~NetLab();
  NetLab(const NetLab&) = delete;
  NetLab& operator=(const NetLab&) = delete;

  int size() const { return static_cast<int>(namespaces_.size()); }
  std::string ip(int i) const;  // worker i's address
  const std::string& netns(int i) const { return namespaces_[i]; }
  // argv prefix that runs a program inside worker i's namespace.
  std::vector<std::string> Exec(int i) const;

  // Every packet between workers from now on.
  void Shape(const LinkShape& shape);
  // Packets between workers of different groups vanish (no error, no
  // reset: a cut cable); a worker in no group is cut from all. Heal() ends it.
  void Partition(const std::vector<std::vector<int>>& groups);
  void Heal();

  struct Counters {
    uint64_t forwarded = 0, lost = 0, duplicated = 0, reordered = 0, cut = 0, bytes = 0;
  };
  Counters counters();

 private:
  struct Packet {
    std::chrono::steady_clock::time_point due;
    uint64_t order;   // sequence number of the packet on its link when sent
    int from, to;     // indices into tuns_
    std::string bytes;
  };
  NetLab() = default;
  absl::Status Setup(int workers);
  void Run();
  void Route(int from, std::string packet, std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int IndexOf(const unsigned char* dst) const;
  double Uniform() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // [0, 1)  // tuns_ index, -1: unknown

  std::string prefix_;                  // "rk<pid>"
  int subnet_ = 0;                      // 10.213.<subnet_>.0/24
  std::vector<std::string> namespaces_;
  std::vector<int> tuns_;               // workers 0..n-1, then the host
  std::atomic<bool> stop_{false};
  std::thread thread_;

  absl::Mutex mu_;
  LinkShape shape_ ABSL_GUARDED_BY(mu_);
  std::vector<int> group_of_ ABSL_GUARDED_BY(mu_);  // empty: no partition
  std::vector<Packet> queue_ ABSL_GUARDED_BY(mu_);   // min-heap by due
  std::vector<std::vector<uint64_t>> sent_ ABSL_GUARDED_BY(mu_);       // per link
  std::vector<std::vector<uint64_t>> delivered_ ABSL_GUARDED_BY(mu_);  // highest order per link
  uint64_t rng_ ABSL_GUARDED_BY(mu_) = 0x5EED;
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reckon::testing

#endif  // RECKON_TESTS_NET_LAB_H_
