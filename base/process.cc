#include "base/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace reckon::base {

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const std::string& binary,
                                                 const std::vector<std::string>& args,
                                                 const std::string& stdout_path,
                                                 const std::string& stderr_path) {
  // Everything the child needs is prepared before fork (no allocation after).
  std::vector<std::string> storage = {binary};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0 || err < 0) {
    if (out >= 0) ::close(out);
    if (err >= 0) ::close(err);
    return absl::UnavailableError(
        absl::StrCat("cannot open ", stdout_path, " or ", stderr_path, ": ", std::strerror(errno)));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out);
    ::close(err);
    return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out);
  ::close(err);
  return ChildProcess(pid);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_), exit_code_(other.exit_code_) {
  other.pid_ = -1;
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    this->~ChildProcess();
    pid_ = other.pid_;
    exit_code_ = other.exit_code_;
    other.pid_ = -1;
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exit_code_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  pid_ = -1;
}

std::optional<int> ChildProcess::Poll() {
  if (exit_code_ || pid_ <= 0) return exit_code_;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return exit_code_;
}

std::optional<int> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!Poll() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return exit_code_;
}

void ChildProcess::Signal(int signal) {
  if (pid_ > 0 && !exit_code_) ::kill(pid_, signal);
}

namespace {

// The kernel's ephemeral port range (where outgoing connections get their
// local ports); Linux's default when it cannot be read.
std::pair<int, int> EphemeralPortRange() {
  int low = 32768, high = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int l = 0, h = 0;
  if (range >> l >> h && l > 0 && h >= l) low = l, high = h;
  return {low, high};
}

// Whether a listening socket could bind 127.0.0.1:`port` now.
bool LoopbackPortFree(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int on = 1;  // as gRPC's listeners: a port with TIME_WAIT leftovers is free
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return free;
}

}  // namespace

absl::StatusOr<std::vector<int>> FreeLoopbackPorts(int count) {
  // Candidates: every unprivileged port outside the ephemeral range, walked
  // from a random start so that clusters started side by side (tests run in
  // parallel) rarely try the same ones.
  const auto [low, high] = EphemeralPortRange();
  std::vector<int> candidates;
  for (int p = 1025; p < low; ++p) candidates.push_back(p);
  for (int p = high + 1; p <= 65535; ++p) candidates.push_back(p);
  std::vector<int> ports;
  const size_t start = candidates.empty() ? 0 : std::random_device{}() % candidates.size();
  for (size_t i = 0; i < candidates.size() && static_cast<int>(ports.size()) < count; ++i) {
    const int port = candidates[(start + i) % candidates.size()];
    if (LoopbackPortFree(port)) ports.push_back(port);
  }
  if (static_cast<int>(ports.size()) < count) {
    return absl::UnavailableError(absl::StrCat("cannot find ", count,
                                               " free ports on 127.0.0.1 outside the ephemeral range ",
                                               low, "-", high));
  }
  return ports;
}

std::string ExecutableDir() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

uint64_t RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return static_cast<uint64_t>(limit.rlim_cur);
}

}  // namespace reckon::base
