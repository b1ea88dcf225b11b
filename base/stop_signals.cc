#include "base/stop_signals.h"

#include <signal.h>

namespace reckon::base {
namespace {

std::atomic<bool> g_stop_requested{false};

void OnStopSignal(int) { g_stop_requested.store(true); }

}  // namespace

const std::atomic<bool>& StopFlag() { return g_stop_requested; }

void CatchStopSignals() {
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

}  // namespace reckon::base
