#include "ctl/net_lab.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace reckon::ctl {
namespace {

using Clock = std::chrono::steady_clock;

// "100mbit" -> 1e8; false when it is not a rate.
bool ParseRate(absl::string_view text, double* bits_per_s) {
  for (const auto& [unit, scale] : {std::pair<absl::string_view, double>{"gbit", 1e9},
                                    {"mbit", 1e6},
                                    {"kbit", 1e3},
                                    {"bit", 1}}) {
    if (absl::EndsWith(text, unit)) {
      double value = 0;
      if (!absl::SimpleAtod(text.substr(0, text.size() - unit.size()), &value) || !(value > 0) ||
          !std::isfinite(value)) {
        return false;
      }
      *bits_per_s = value * scale;
      return true;
    }
  }
  return false;
}

// "1ms" -> 1000 us; false when it is not a time >= 0.
bool ParseTime(absl::string_view text, std::chrono::microseconds* time) {
  for (const auto& [unit, scale] :
       {std::pair<absl::string_view, double>{"us", 1}, {"ms", 1e3}, {"s", 1e6}}) {
    if (absl::EndsWith(text, unit)) {
      double value = 0;
      if (!absl::SimpleAtod(text.substr(0, text.size() - unit.size()), &value) || !(value >= 0) ||
          value * scale > 3.6e9) {
        return false;
      }
      *time = std::chrono::microseconds(static_cast<int64_t>(std::llround(value * scale)));
      return true;
    }
  }
  return false;
}

std::string TimeText(std::chrono::microseconds t) {
  if (t.count() % 1000 != 0) return absl::StrCat(t.count(), "us");
  return absl::StrCat(t.count() / 1000, "ms");
}

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

absl::StatusOr<LinkShape> ParseLinkShape(const std::string& text) {
  LinkShape shape;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    const absl::string_view key = part.substr(0, eq);
    const absl::string_view value = eq == absl::string_view::npos ? "" : part.substr(eq + 1);
    bool ok = false;
    if (key == "rate") {
      ok = ParseRate(value, &shape.rate_bits_per_s);
    } else if (key == "delay") {
      ok = ParseTime(value, &shape.delay);
    } else if (key == "jitter") {
      ok = ParseTime(value, &shape.jitter);
    } else if (key == "queue") {
      ok = ParseTime(value, &shape.queue) && shape.queue.count() > 0;
    } else if (key == "loss" || key == "duplicate") {
      double p = 0;
      ok = absl::SimpleAtod(value, &p) && p >= 0 && p < 1;
      (key == "loss" ? shape.loss : shape.duplicate) = p;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown link property '", key, "' in '", text,
                       "' (known: rate, delay, jitter, loss, duplicate, queue)"));
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad value in '", part,
          "': rate takes e.g. 100mbit or 1gbit; delay, jitter and queue "
          "e.g. 1ms or 250us (queue > 0); loss and duplicate a probability in [0, 1)"));
    }
  }
  if (shape.jitter > shape.delay) {
    return absl::InvalidArgumentError(
        absl::StrCat("jitter ", TimeText(shape.jitter), " exceeds delay ", TimeText(shape.delay),
                     " in '", text, "' (a packet cannot arrive before it was sent)"));
  }
  return shape;
}

std::string LinkShapeText(const LinkShape& shape) {
  std::vector<std::string> parts;
  if (shape.rate_bits_per_s > 0) {
    const double r = shape.rate_bits_per_s;
    parts.push_back(r >= 1e9 && std::fmod(r, 1e9) == 0   ? absl::StrCat("rate=", r / 1e9, "gbit")
                    : r >= 1e6 && std::fmod(r, 1e6) == 0 ? absl::StrCat("rate=", r / 1e6, "mbit")
                    : r >= 1e3 && std::fmod(r, 1e3) == 0 ? absl::StrCat("rate=", r / 1e3, "kbit")
                                                         : absl::StrCat("rate=", r, "bit"));
    parts.push_back(absl::StrCat("queue=", TimeText(shape.queue)));
  }
  parts.push_back(absl::StrCat("delay=", TimeText(shape.delay)));
  if (shape.jitter.count() > 0) parts.push_back(absl::StrCat("jitter=", TimeText(shape.jitter)));
  if (shape.loss > 0) parts.push_back(absl::StrCat("loss=", shape.loss));
  if (shape.duplicate > 0) parts.push_back(absl::StrCat("duplicate=", shape.duplicate));
  return absl::StrJoin(parts, ",");
}

absl::Status NetLab::Available() {
  if (geteuid() != 0) return absl::UnavailableError("needs root (network namespaces, TUN)");
  if (IpBinary().empty()) return absl::UnavailableError("needs `ip` (Debian package iproute2)");
  if (access("/dev/net/tun", R_OK | W_OK) != 0) {
    return absl::UnavailableError("needs /dev/net/tun (CONFIG_TUN)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NetLab>> NetLab::Create(int workers, int mtu) {
  if (absl::Status s = Available(); !s.ok()) return s;
  if (workers < 1 || workers > 250) {
    return absl::InvalidArgumentError("a network lab holds 1 to 250 workers");
  }
  if (mtu < 576 || mtu > 65535) return absl::InvalidArgumentError("MTU must be 576 to 65535");
  DeleteStaleNamespaces();
  std::unique_ptr<NetLab> lab(new NetLab());
  if (absl::Status s = lab->Setup(workers, mtu); !s.ok()) return s;  // the destructor cleans up
  lab->thread_ = std::thread([l = lab.get()] { l->Run(); });
  return lab;
}

absl::Status NetLab::Setup(int workers, int mtu) {
  prefix_ = absl::StrCat("rk", getpid());
  subnet_ = 20 + getpid() % 200;
  {
    absl::MutexLock l(&mu_);
    sent_.assign(workers + 1, std::vector<uint64_t>(workers + 1, 0));
    delivered_ = sent_;
    uplink_free_.assign(workers + 1, Clock::time_point{});
    downlink_free_ = uplink_free_;
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
    for (const std::string& step : {absl::StrCat("link set ", tun, " netns ", ns),
                                    absl::StrCat("-n ", ns, " addr add ", ip(i), "/24 dev ", tun),
                                    absl::StrCat("-n ", ns, " link set ", tun, " mtu ", mtu, " up"),
                                    absl::StrCat("-n ", ns, " link set lo up")}) {
      if (absl::Status s = Ip(step); !s.ok()) return s;
    }
  }
  const std::string host_tun = absl::StrCat(prefix_, "h");
  absl::StatusOr<int> fd = OpenTun(host_tun);
  if (!fd.ok()) return fd.status();
  tuns_.push_back(*fd);
  for (const std::string& step : {absl::StrCat("addr add ", host_ip(), "/24 dev ", host_tun),
                                  absl::StrCat("link set ", host_tun, " mtu ", mtu, " up")}) {
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

std::string NetLab::host_ip() const { return absl::StrCat("10.213.", subnet_, ".254"); }

std::vector<std::string> NetLab::Exec(int i) const {
  return {IpBinary(), "netns", "exec", namespaces_[i]};
}

absl::Status NetLab::EnterNamespace(int i) const {
  const std::string path = absl::StrCat("/run/netns/", namespaces_[i]);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(path, ": ", strerror(errno)));
  const int rc = setns(fd, CLONE_NEWNET);
  const int e = errno;
  close(fd);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("setns ", path, ": ", strerror(e)));
  return absl::OkStatus();
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

Clock::duration NetLab::TransmitTime(size_t bytes) const {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(8.0 * static_cast<double>(bytes) / shape_.rate_bits_per_s));
}

void NetLab::Push(Packet packet) {
  queue_.push_back(std::move(packet));
  std::push_heap(queue_.begin(), queue_.end(),
                 [](const Packet& a, const Packet& b) { return a.due > b.due; });
}

void NetLab::Route(int from, std::string packet, Clock::time_point now) {
  // IPv4 only (the workers use nothing else); anything else is not forwarded.
  if (packet.size() < 20 || (static_cast<unsigned char>(packet[0]) >> 4) != 4) return;
  const int to = IndexOf(reinterpret_cast<const unsigned char*>(packet.data()) + 16);
  if (to < 0 || to == from) return;
  const int host = static_cast<int>(namespaces_.size());
  const uint64_t order = ++sent_[from][to];
  if (from == host || to == host) {  // the watcher's packets: never shaped
    Push(Packet{now, order, from, to, /*at_downlink=*/true, std::move(packet)});
    return;
  }
  if (!group_of_.empty() && (group_of_[from] < 0 || group_of_[from] != group_of_[to])) {
    ++counters_.cut;
    return;
  }
  if (Uniform() < shape_.loss) {
    ++counters_.lost;
    return;
  }
  int copies = 1;
  if (Uniform() < shape_.duplicate) {
    copies = 2;
    ++counters_.duplicated;
  }
  for (int c = 0; c < copies; ++c) {
    // The sender's uplink: a FIFO at the link's rate; a full queue drops.
    Clock::time_point sent = now;
    if (shape_.rate_bits_per_s > 0) {
      const Clock::time_point start = std::max(now, uplink_free_[from]);
      if (start - now > shape_.queue) {
        ++counters_.overflowed;
        continue;
      }
      uplink_free_[from] = sent = start + TransmitTime(packet.size());
    }
    Clock::duration d = shape_.delay;
    if (shape_.jitter.count() > 0) {
      d += std::chrono::duration_cast<Clock::duration>((2 * Uniform() - 1) * shape_.jitter);
      if (d < Clock::duration::zero()) d = Clock::duration::zero();
    }
    Push(Packet{sent + d, order, from, to, /*at_downlink=*/shape_.rate_bits_per_s <= 0,
                c + 1 < copies ? packet : std::move(packet)});
  }
}

void NetLab::EnterDownlink(Packet packet) {
  // It arrived at packet.due; the downlink sends in order of arrival.
  packet.at_downlink = true;
  if (shape_.rate_bits_per_s <= 0) {  // the rate was lifted while it was on its way
    Push(std::move(packet));
    return;
  }
  const Clock::time_point start = std::max(packet.due, downlink_free_[packet.to]);
  if (start - packet.due > shape_.queue) {
    ++counters_.overflowed;
    return;
  }
  downlink_free_[packet.to] = packet.due = start + TransmitTime(packet.bytes.size());
  Push(std::move(packet));
}

void NetLab::Deliver(Packet& p) {
  // Reordered: an earlier-sent packet of the same link arrives after this.
  uint64_t& highest = delivered_[p.from][p.to];
  if (p.order < highest) ++counters_.reordered;
  highest = std::max(highest, p.order);
  if (write(tuns_[p.to], p.bytes.data(), p.bytes.size()) == static_cast<ssize_t>(p.bytes.size())) {
    ++counters_.forwarded;
    counters_.bytes += p.bytes.size();
  } else {
    ++counters_.lost;  // the receiving device's queue is full: a drop, as on a wire
  }
}

void NetLab::Run() {
  std::vector<pollfd> fds(tuns_.size());
  for (size_t i = 0; i < tuns_.size(); ++i) fds[i] = {tuns_[i], POLLIN, 0};
  std::string buffer(65536, '\0');
  auto later = [](const Packet& a, const Packet& b) { return a.due > b.due; };
  while (!stop_) {
    // Sleep until the next packet is due (to the microsecond: at 100 Mbit/s
    // a 1500-byte packet takes 120 us), or 20 ms to look at stop_.
    timespec wait{0, 20'000'000};
    {
      absl::MutexLock l(&mu_);
      if (!queue_.empty()) {
        const int64_t ns = std::clamp<int64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(queue_.front().due - Clock::now())
                .count(),
            0, 20'000'000);
        wait.tv_nsec = ns;
      }
    }
    if (ppoll(fds.data(), fds.size(), &wait, nullptr) < 0 && errno != EINTR) break;
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
      if (p.at_downlink) {
        Deliver(p);
      } else {
        EnterDownlink(std::move(p));
      }
    }
  }
}

}  // namespace reckon::ctl
