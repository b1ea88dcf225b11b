#include "base/stop_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace reckon::base {
namespace {

std::atomic<bool> g_stop_requested{false};
// The first stop signal's number and sender (siginfo's si_pid), and the
// sender's /proc/PID/comm read in the handler (a sender such as `kill` is
// gone by the time anyone asks): written once, by the first handler call,
// before g_first_signal_recorded is set.
std::atomic<int> g_first_signal{0};
std::atomic<bool> g_first_signal_recorded{false};
pid_t g_first_sender = 0;
char g_first_sender_comm[32] = {};

// /proc/PID/comm of `pid` into g_first_sender_comm, with open, read and
// close only (async-signal-safe: no allocation, no stdio).
void ReadSenderComm(pid_t pid) {
  char path[32] = "/proc/";
  char digits[16];
  int n = 0;
  for (pid_t v = pid; v > 0 && n < 15; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  int at = 6;
  while (n > 0) path[at++] = digits[--n];
  const char tail[] = "/comm";
  for (const char c : tail) path[at++] = c;  // the terminating NUL included
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  const ssize_t got = ::read(fd, g_first_sender_comm, sizeof(g_first_sender_comm) - 1);
  ::close(fd);
  for (ssize_t i = 0; i < got; ++i) {
    if (g_first_sender_comm[i] == '\n') g_first_sender_comm[i] = '\0';
  }
}

void OnStopSignal(int signal, siginfo_t* info, void*) {
  int none = 0;
  if (g_first_signal.compare_exchange_strong(none, signal)) {
    const int saved_errno = errno;
    g_first_sender = info != nullptr ? info->si_pid : 0;
    if (g_first_sender > 0) ReadSenderComm(g_first_sender);
    errno = saved_errno;
    g_first_signal_recorded.store(true);
  }
  g_stop_requested.store(true);
}

void Catch(int signal) {
  struct sigaction action = {};
  action.sa_sigaction = OnStopSignal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, nullptr);
}

}  // namespace

const std::atomic<bool>& StopFlag() { return g_stop_requested; }

void CatchStopSignals() {
  Catch(SIGTERM);
  Catch(SIGINT);
}

void CatchSigterm() { Catch(SIGTERM); }

std::string StopSignalSource() {
  if (!g_first_signal_recorded.load()) return "no signal";
  const int signal = g_first_signal.load();
  const std::string name = signal == SIGTERM  ? "SIGTERM"
                           : signal == SIGINT ? "SIGINT"
                                              : absl::StrCat("signal ", signal);
  if (g_first_sender <= 0) return absl::StrCat(name, " from the kernel");
  if (g_first_sender_comm[0] == '\0') return absl::StrCat(name, " from pid ", g_first_sender);
  return absl::StrCat(name, " from pid ", g_first_sender, " (", g_first_sender_comm, ")");
}

std::string StoppedBySignal() {
  if (!g_first_signal_recorded.load()) return "stopped by a signal";
  return absl::StrCat("stopped by a signal (", StopSignalSource(), ")");
}

}  // namespace reckon::base
