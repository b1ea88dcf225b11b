// Test faults of the training replica, outside the training code (as
// server/fault_link.h keeps link faults out of the node): Backends that
// forward every call to the real one and change one behaviour.
//  - WithWeightCorruption: just before its N-th training step, adds one
//    quantum to one weight, the way a bit flip or a faulty device would
//    corrupt memory. The replica check (docs/gossip.md "Divergence
//    detection") must find it, and the worker re-join. `--fault-corrupt-weight-at-step`.
//  - WithSlowSteps: no training step starts sooner than a given time after
//    the one before (a slow device). A test that must know how long a run
//    lasts at least (a worker still training when another resumes) sets it
//    instead of calibrating on a machine whose speed varies 2x from one run
//    to the next. `--fault-slow-step-ms`.
// Both are called on the training thread only, as the backend they wrap.
#ifndef RECKON_WORKER_FAULT_BACKEND_H_
#define RECKON_WORKER_FAULT_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>

#include "model/backend.h"

namespace reckon::worker {

// `step` is 1-based; `log` gets one line when the fault strikes.
std::unique_ptr<model::Backend> WithWeightCorruption(std::unique_ptr<model::Backend> real,
                                                     uint64_t step, std::ostream& log);

// `min_step` > 0: the shortest time from one step's start to the next's.
std::unique_ptr<model::Backend> WithSlowSteps(std::unique_ptr<model::Backend> real,
                                              std::chrono::microseconds min_step);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_FAULT_BACKEND_H_
