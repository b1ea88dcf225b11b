// The exit codes of reckon-worker and of every reckonctl command: one table
// for both (docs/flags.md "Exit codes"), so that a supervisor (systemd's
// RestartPreventExitStatus, a Kubernetes restart policy, a script) reads
// them alike whichever program it runs.
//
// Threads: constants, any thread. Errors: none.
#ifndef RECKON_BASE_EXIT_CODES_H_
#define RECKON_BASE_EXIT_CODES_H_

namespace reckon::base {

// Done: the run finished (or, after it, serving was stopped); the command did
// what it was asked.
inline constexpr int kExitOk = 0;
// A failure while running, or an input it cannot use (missing data, a
// corrupt checkpoint or file, a peer that refused, replicas that diverged).
inline constexpr int kExitFailed = 1;
// A bad flag or argument: nothing was started.
inline constexpr int kExitUsage = 2;
// Stopped by SIGTERM or SIGINT before it was done; what it keeps (a
// checkpoint, the workers' summaries) says where it stopped.
inline constexpr int kExitStopped = 3;
// reckon-worker cannot start: a file a flag names is missing or unusable
// (the data, the checkpoint to resume, a TLS file), or the backend it asks
// for is not there. A restart fails the same way: a supervisor should not
// retry it (deploy/systemd's RestartPreventExitStatus). reckonctl's
// commands, run by hand, exit 1 for a file they cannot use.
inline constexpr int kExitCannotStart = 4;

}  // namespace reckon::base

#endif  // RECKON_BASE_EXIT_CODES_H_
