// reckon-worker's flags, read once into DaemonOptions: main() and nothing
// else below it reads a flag. The training flags are training_flags.cc's;
// the member's (cluster, security, transport and limits, observability,
// synthetic members, fault injection) are defined in daemon_flags.cc.
// docs/flags.md lists them all (tests/docs/check_docs.py keeps it true).
//
// Threads: the main thread, once, after the flags are parsed.
#ifndef RECKON_WORKER_DAEMON_FLAGS_H_
#define RECKON_WORKER_DAEMON_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "base/flags.h"
#include "worker/gossip_peers.h"
#include "worker/synthetic.h"
#include "worker/trainer.h"

namespace reckon::worker {

struct DaemonOptions {
  TrainerOptions trainer;
  std::optional<PeerOptions> peers;           // nullopt: --standalone
  std::optional<SyntheticOptions> synthetic;  // --synthetic
  bool serve_after_training = false;          // --after-training serve
  std::string http_listen;                    // empty: no HTTP endpoint
  uint64_t ready_max_behind = 0;
  std::string summary_json;  // empty: none
};

// Every flag of reckon-worker under the headings of --help (the fault
// injection for tests only under --helpfull). A flag defined in either file
// and in no group is listed under "Other", which the worker's CLI test
// refuses.
absl::StatusOr<base::FlagScope> WorkerFlags();

// The parsed flags read and checked. kInvalidArgument: a flag that does not
// fit, named (exit 2). Other codes: what a flag names cannot be used (the
// data's identity, TLS files: exit 4).
absl::StatusOr<DaemonOptions> DaemonOptionsFromFlags();

}  // namespace reckon::worker

#endif  // RECKON_WORKER_DAEMON_FLAGS_H_
