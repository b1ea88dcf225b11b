// SIGTERM and SIGINT, caught: a program finishes what it is doing (a step,
// a wait, its workers) and exits kExitStopped (base/exit_codes.h) instead of
// dying mid-write. One flag per process, shared by reckon-worker, the
// reckonctl commands that run other processes (local, compare, lab) and
// the Python module (SIGTERM only: Python keeps SIGINT for its
// KeyboardInterrupt). Any thread reads it; only the handler sets it.
#ifndef RECKON_BASE_STOP_SIGNALS_H_
#define RECKON_BASE_STOP_SIGNALS_H_

#include <atomic>
#include <string>

namespace reckon::base {

// True once a caught stop signal came. Lock-free.
const std::atomic<bool>& StopFlag();

// From now on SIGTERM and SIGINT set StopFlag instead of ending the process.
void CatchStopSignals();

// The same for SIGTERM alone (SIGINT left as it was).
void CatchSigterm();

// The first stop signal and who sent it, for the line that says the
// program stopped: "SIGTERM from pid 4242 (torchrun)", "SIGINT from the
// kernel" (a terminal's ^C: no sending process), or "no signal" before
// one. The sender's name is its /proc/PID/comm, read by the handler as the
// signal lands (open, read and close are safe there; a `kill` is gone a
// moment later); a sender whose name could not be read is named by its pid
// alone. Any thread.
std::string StopSignalSource();

// "stopped by a signal", and where one was caught, its source:
// "stopped by a signal (SIGTERM from pid 4242 (torchrun))". Every message
// that says a program or a wait stopped for a signal begins with it.
std::string StoppedBySignal();

}  // namespace reckon::base

#endif  // RECKON_BASE_STOP_SIGNALS_H_
