// SIGTERM and SIGINT, caught: a program finishes what it is doing (a step,
// a wait, its workers) and exits kExitStopped (base/exit_codes.h) instead of
// dying mid-write. One flag per process, shared by reckon-worker and the
// reckonctl commands that run other processes (local, compare, lab). Any
// thread reads it; only the handlers set it.
#ifndef RECKON_BASE_STOP_SIGNALS_H_
#define RECKON_BASE_STOP_SIGNALS_H_

#include <atomic>

namespace reckon::base {

// True once SIGTERM or SIGINT came (after CatchStopSignals). Lock-free.
const std::atomic<bool>& StopFlag();

// From now on SIGTERM and SIGINT set StopFlag instead of ending the process.
void CatchStopSignals();

}  // namespace reckon::base

#endif  // RECKON_BASE_STOP_SIGNALS_H_
