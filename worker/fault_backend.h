// Test faults of the training replica, outside the training code (as
// server/fault_link.h keeps link faults out of the node): a Backend that
// forwards every call to the real one and, just before its N-th training
// step, adds one quantum to one weight, the way a bit flip or a faulty
// device would corrupt memory. The replica check (docs/gossip.md
// "Divergence detection") must find and repair it. Used only when
// `--fault-corrupt-weight-at-step` is given.
#ifndef RECKON_WORKER_FAULT_BACKEND_H_
#define RECKON_WORKER_FAULT_BACKEND_H_

#include <cstdint>
#include <memory>
#include <ostream>

#include "model/backend.h"

namespace reckon::worker {

// `step` is 1-based; `log` gets one line when the fault strikes.
std::unique_ptr<model::Backend> WithWeightCorruption(std::unique_ptr<model::Backend> real,
                                                     uint64_t step, std::ostream& log);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_FAULT_BACKEND_H_
