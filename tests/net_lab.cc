#include "tests/net_lab.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace reckon::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string IpBinary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

// Runs `ip <args>`; the error names the command and what it printed.
absl::Status Ip(const std::string& args) {
  const std::string command = absl::StrCat(IpBinary(), " ", args, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("cannot run ", command));
  std::string output;
  char buffer[256];
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  if (status != 0) {
    return absl::InternalError(absl::StrCat("`ip ", args, "` failed: ", output));
  }
  return absl::OkStatus();
}

// Namespaces "rk<pid>w<i>" whose test process is gone (killed before its
// destructor ran).
void DeleteStaleNamespaces() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rk", 0) != 0) continue;
    const size_t w = name.find('w');
    if (w == std::string::npos || w == 2) continue;
    const std::string pid_text = name.substr(2, w - 2);
    if (pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (kill(pid, 0) != 0 && errno == ESRCH) (void)Ip(absl::StrCat("netns del ", name));
  }
}

absl::StatusOr<int> OpenTun(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("/dev/net/tun: ", strerror(errno)));
  ifreq request{};
  request.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::snprintf(request.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(fd, TUNSETIFF, &request) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("TUNSETIFF ", name, ": ", strerror(e)));
  }
  return fd;
}

}  // namespace

absl::Status NetLab::Available() {
  if (geteuid() != 0) return absl::UnavailableError("needs root (network namespaces, TUN)");
  if (IpBinary().empty()) return absl::UnavailableError("needs `ip` (Debian package iproute2)");
  if (access("/dev/net/tun", R_OK | W_OK) != 0) {
    return absl::UnavailableError("needs /dev/net/tun (CONFIG_TUN)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NetLab>> NetLab::Create(int workers) {
  if (absl::Status s = Available(); !s.ok()) return s;
  DeleteStaleNamespaces();
  std::unique_ptr<NetLab> lab(new NetLab());
  if (absl::Status s = lab->Setup(workers); !s.ok()) return s;  // the destructor cleans up
  lab->thread_ = std::thread([l = lab.get()] { l->Run(); });
  return lab;
}

absl::Status NetLab::Setup(int workers) {
  prefix_ = absl::StrCat("rk", getpid());
  subnet_ = 20 + getpid() % 200;
  {
    absl::MutexLock l(&mu_);
    sent_.assign(workers + 1, std::vector<uint64_t>(workers + 1, 0));
    delivered_ = sent_;
  }
  for (int i = 0; i < workers; ++i) {
    const std::string ns = absl::StrCat(prefix_, "w", i);
    if (absl::Status s = Ip(absl::StrCat("netns add ", ns)); !s.ok()) return s;
    namespaces_.push_back(ns);
    const std::string tun = absl::StrCat(prefix_, "t", i);
    absl::StatusOr<int> fd = OpenTun(tun);
    if (!fd.ok()) return fd.status();
    tuns_.push_back(*fd);
    // The device moves into the namespace; its file descriptor stays here.
    for (const std::string& step :
         {absl::StrCat("link set ", tun, " netns ", ns),
          absl::StrCat("-n ", ns, " addr add ", ip(i), "/24 dev ", tun),
          absl::StrCat("-n ", ns, " link set ", tun, " up"),
          absl::StrCat("-n ", ns, " link set lo up")}) {
      if (absl::Status s = Ip(step); !s.ok()) return s;
    }
  }
  const std::string host_tun = absl::StrCat(prefix_, "h");
  absl::StatusOr<int> fd = OpenTun(host_tun);
  if (!fd.ok()) return fd.status();
  tuns_.push_back(*fd);
  for (const std::string& step :
       {absl::StrCat("addr add 10.213.", subnet_, ".254/24 dev ", host_tun),
        absl::StrCat("link set ", host_tun, " up")}) {
    if (absl::Status s = Ip(step); !s.ok()) return s;
  }
  return absl::OkStatus();
}

NetLab::~NetLab() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  for (int fd : tuns_) close(fd);  // the TUN devices go with them
  for (const std::string& ns : namespaces_) (void)Ip(absl::StrCat("netns del ", ns));
}

std::string NetLab::ip(int i) const { return absl::StrCat("10.213.", subnet_, ".", i + 1); }

std::vector<std::string> NetLab::Exec(int i) const {
  return {IpBinary(), "netns", "exec", namespaces_[i]};
}

void NetLab::Shape(const LinkShape& shape) {
  absl::MutexLock l(&mu_);
  shape_ = shape;
}

void NetLab::Partition(const std::vector<std::vector<int>>& groups) {
  absl::MutexLock l(&mu_);
  group_of_.assign(namespaces_.size(), -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int i : groups[g]) group_of_[i] = static_cast<int>(g);
  }
}

void NetLab::Heal() {
  absl::MutexLock l(&mu_);
  group_of_.clear();
}

NetLab::Counters NetLab::counters() {
  absl::MutexLock l(&mu_);
  return counters_;
}

int NetLab::IndexOf(const unsigned char* dst) const {
  if (dst[0] != 10 || dst[1] != 213 || dst[2] != subnet_) return -1;
  if (dst[3] == 254) return static_cast<int>(namespaces_.size());
  if (dst[3] >= 1 && dst[3] <= namespaces_.size()) return dst[3] - 1;
  return -1;
}

double NetLab::Uniform() {  // SplitMix64 step: [0, 1)
  uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

void NetLab::Route(int from, std::string packet, Clock::time_point now) {
  // IPv4 only (the workers use nothing else); anything else is not forwarded.
  if (packet.size() < 20 || (static_cast<unsigned char>(packet[0]) >> 4) != 4) return;
  const int to = IndexOf(reinterpret_cast<const unsigned char*>(packet.data()) + 16);
  if (to < 0 || to == from) return;
  const int host = static_cast<int>(namespaces_.size());
  const uint64_t order = ++sent_[from][to];
  int copies = 1;
  Clock::duration delay{0};
  if (from != host && to != host) {
    if (!group_of_.empty() &&
        (group_of_[from] < 0 || group_of_[from] != group_of_[to])) {
      ++counters_.cut;
      return;
    }
    if (Uniform() < shape_.loss) {
      ++counters_.lost;
      return;
    }
    if (Uniform() < shape_.duplicate) {
      copies = 2;
      ++counters_.duplicated;
    }
    delay = shape_.delay;
  }
  for (int c = 0; c < copies; ++c) {
    Clock::duration d = delay;
    if (from != host && to != host && shape_.jitter.count() > 0) {
      d += std::chrono::duration_cast<Clock::duration>((2 * Uniform() - 1) * shape_.jitter);
      if (d < Clock::duration::zero()) d = Clock::duration::zero();
    }
    queue_.push_back(Packet{now + d, order, from, to, c + 1 < copies ? packet : std::move(packet)});
    std::push_heap(queue_.begin(), queue_.end(),
                   [](const Packet& a, const Packet& b) { return a.due > b.due; });
  }
}

void NetLab::Run() {
  std::vector<pollfd> fds(tuns_.size());
  for (size_t i = 0; i < tuns_.size(); ++i) fds[i] = {tuns_[i], POLLIN, 0};
  std::string buffer(65536, '\0');
  auto later = [](const Packet& a, const Packet& b) { return a.due > b.due; };
  while (!stop_) {
    int wait_ms = 20;
    {
      absl::MutexLock l(&mu_);
      if (!queue_.empty()) {
        const auto until = queue_.front().due - Clock::now();
        wait_ms = static_cast<int>(std::clamp<int64_t>(
            std::chrono::ceil<std::chrono::milliseconds>(until).count(), 0, 20));
      }
    }
    if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) break;
    const auto now = Clock::now();
    absl::MutexLock l(&mu_);
    for (size_t i = 0; i < fds.size(); ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      for (;;) {
        const ssize_t n = read(tuns_[i], buffer.data(), buffer.size());
        if (n <= 0) break;
        Route(static_cast<int>(i), buffer.substr(0, static_cast<size_t>(n)), now);
      }
    }
    while (!queue_.empty() && queue_.front().due <= Clock::now()) {
      std::pop_heap(queue_.begin(), queue_.end(), later);
      Packet p = std::move(queue_.back());
      queue_.pop_back();
      // Reordered: an earlier-sent packet of the same link arrives after this.
      uint64_t& highest = delivered_[p.from][p.to];
      if (p.order < highest) ++counters_.reordered;
      highest = std::max(highest, p.order);
      if (write(tuns_[p.to], p.bytes.data(), p.bytes.size()) ==
          static_cast<ssize_t>(p.bytes.size())) {
        ++counters_.forwarded;
        counters_.bytes += p.bytes.size();
      } else {
        ++counters_.lost;  // the receiving device's queue is full: a drop, as on a wire
      }
    }
  }
}

}  // namespace reckon::testing
