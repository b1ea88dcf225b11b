// Child processes for `reckonctl local` and the multi-process tests: spawn
// with output to files, poll, signal, wait with a deadline. POSIX only.
//
// Threads: a ChildProcess is one thread's at a time. Errors: a spawn that
// fails (fork or exec) is kUnavailable, named.
#ifndef RECKON_BASE_PROCESS_H_
#define RECKON_BASE_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace reckon::base {

class ChildProcess {
 public:
  // Starts `binary args...` with stdout and stderr appended to the files
  // (created if missing). kUnavailable when fork or exec fails.
  static absl::StatusOr<ChildProcess> Spawn(const std::string& binary,
                                            const std::vector<std::string>& args,
                                            const std::string& stdout_path,
                                            const std::string& stderr_path);
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  // Kills (SIGKILL) and reaps a child still running: none outlives its owner.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // The exit code once it has exited (128 + signal when killed), else none.
  std::optional<int> Poll();
  // Waits up to `timeout`; none when it is still running then.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  void Signal(int signal);

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// `count` distinct TCP ports free on 127.0.0.1 now, all outside the
// kernel's ephemeral range so that no outgoing connection (a worker dialling
// its peers) takes one before its worker listens. Only checked, never held:
// another process binding one in between is still possible, and the worker
// then reports "cannot listen".
absl::StatusOr<std::vector<int>> FreeLoopbackPorts(int count);

// The directory holding the running executable.
std::string ExecutableDir();

// Raises this process's soft limit of open files to its hard limit, and
// returns the soft limit now (0 when it cannot be read). A worker keeps a
// descriptor open a NumPy feature file (worker/samples.h) beside its
// sockets; the soft limit is often 1,024 where the hard one is far higher.
uint64_t RaiseOpenFileLimit();

}  // namespace reckon::base

#endif  // RECKON_BASE_PROCESS_H_
