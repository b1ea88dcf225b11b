// A network lab: one network namespace per worker, joined by a switch that
// runs in the calling process (a test, or `reckonctl local --link`) and
// shapes packets the way a cloud's links do (each node's link has a rate in
// each direction, with a bounded queue) and the way bad links do (loss,
// duplication, delay with jitter, hence reordering), or cuts the network
// into groups (partitions).
//
// Why not netem: the kernels of these machines are built without
// CONFIG_NET_SCH_NETEM (`tc qdisc add ... netem` answers "Specified qdisc
// kind is unknown"), nor prio/fq/fq_codel; TUN is there, and so are tbf and
// htb, but those shape only what leaves a device, and delay and loss need
// the switch anyway: so the switch does all of it, in one place, for both
// directions. Each namespace gets a TUN device with its address, and every
// IPv4 packet any worker sends is read by the switch, which decides its
// fate and writes it, possibly later, possibly twice, into the destination's
// TUN. Workers see a real IP network: real TCP with its congestion control
// and retransmissions, real gRPC over it.
//
// The rate model is a cloud instance's: node i's link carries `rate` bits/s
// out (its uplink) and `rate` in (its downlink), each a FIFO that drops what
// would wait longer than `queue` (a tail drop, as a rate limiter does). A
// packet from a to b leaves a's uplink, crosses the fabric in delay +-
// jitter, and queues at b's downlink; so a node sending to N-1 peers shares
// its one uplink among them, as on a real machine.
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
//
// Threads: a NetLab is one thread's (its link shapers run their own
// threads). Errors: a namespace, link or TUN that cannot be made is the
// failing command's error, named; Available() says why none can be.
#ifndef RECKON_CTL_NET_LAB_H_
#define RECKON_CTL_NET_LAB_H_

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

namespace reckon::ctl {

// What happens to each packet between two workers.
struct LinkShape {
  double loss = 0;                          // probability a packet is dropped
  double duplicate = 0;                     // probability it is delivered twice
  std::chrono::microseconds delay{0};       // one way, across the fabric
  std::chrono::microseconds jitter{0};      // delay is uniform in delay +- jitter
  double rate_bits_per_s = 0;               // each node's link, each direction; 0: unlimited
  std::chrono::microseconds queue{50'000};  // a rate-limited packet waits at most this, or drops
};

// "rate=100mbit,delay=1ms,jitter=100us,loss=0.01,duplicate=0,queue=50ms":
// any subset, in any order. Rates take bit, kbit, mbit, gbit (powers of
// 1000, as tc); times take us, ms, s. The error names the bad part.
absl::StatusOr<LinkShape> ParseLinkShape(const std::string& text);
// The same form, for logs and tables ("rate=100mbit,delay=1ms").
std::string LinkShapeText(const LinkShape& shape);

class NetLab {
 public:
  // OK, or why this machine cannot run it (not root, no TUN, no `ip`).
  static absl::Status Available();
  // `mtu`: of every TUN device (1500 like most clouds; 9001 on AWS).
  static absl::StatusOr<std::unique_ptr<NetLab>> Create(int workers, int mtu = 1500);
  ~NetLab();
  NetLab(const NetLab&) = delete;
  NetLab& operator=(const NetLab&) = delete;

  int size() const { return static_cast<int>(namespaces_.size()); }
  std::string ip(int i) const;  // worker i's address
  std::string host_ip() const;  // the calling process's side: never impaired
  const std::string& netns(int i) const { return namespaces_[i]; }
  // argv prefix that runs a program inside worker i's namespace.
  std::vector<std::string> Exec(int i) const;
  // Moves the calling thread (only it: a network namespace is per thread)
  // into worker i's namespace; sockets it opens from then on live there.
  absl::Status EnterNamespace(int i) const;

  // Every packet between workers from now on.
  void Shape(const LinkShape& shape);
  // Packets between workers of different groups vanish (no error, no
  // reset: a cut cable); a worker in no group is cut from all. Heal() ends it.
  void Partition(const std::vector<std::vector<int>>& groups);
  void Heal();

  struct Counters {
    uint64_t forwarded = 0, lost = 0, duplicated = 0, reordered = 0, cut = 0, bytes = 0;
    uint64_t overflowed = 0;  // dropped by a full rate-limited queue
  };
  Counters counters();

 private:
  using Clock = std::chrono::steady_clock;
  struct Packet {
    Clock::time_point due;  // when it reaches its next stage
    uint64_t order;         // sequence number of the packet on its link when sent
    int from, to;           // indices into tuns_
    bool at_downlink;       // false: crossing the fabric; true: leaving the downlink
    std::string bytes;
  };
  NetLab() = default;
  absl::Status Setup(int workers, int mtu);
  void Run();
  void Route(int from, std::string packet, Clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A packet that crossed the fabric joins its destination's downlink queue.
  void EnterDownlink(Packet packet) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Deliver(Packet& packet) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Push(Packet packet) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Clock::duration TransmitTime(size_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int IndexOf(const unsigned char* dst) const;          // tuns_ index, -1: unknown
  double Uniform() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // [0, 1)

  std::string prefix_;  // "rk<pid>"
  int subnet_ = 0;      // 10.213.<subnet_>.0/24
  std::vector<std::string> namespaces_;
  std::vector<int> tuns_;  // workers 0..n-1, then the host
  std::atomic<bool> stop_{false};
  std::thread thread_;

  absl::Mutex mu_;
  LinkShape shape_ ABSL_GUARDED_BY(mu_);
  std::vector<int> group_of_ ABSL_GUARDED_BY(mu_);                     // empty: no partition
  std::vector<Packet> queue_ ABSL_GUARDED_BY(mu_);                     // min-heap by due
  std::vector<std::vector<uint64_t>> sent_ ABSL_GUARDED_BY(mu_);       // per link
  std::vector<std::vector<uint64_t>> delivered_ ABSL_GUARDED_BY(mu_);  // highest order per link
  // When each node's uplink and downlink are next free (rate-limited links).
  std::vector<Clock::time_point> uplink_free_ ABSL_GUARDED_BY(mu_);
  std::vector<Clock::time_point> downlink_free_ ABSL_GUARDED_BY(mu_);
  uint64_t rng_ ABSL_GUARDED_BY(mu_) = 0x5EED;
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace reckon::ctl

#endif  // RECKON_CTL_NET_LAB_H_
