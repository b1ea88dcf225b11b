// What a member's gossip is configured with (PeerOptions: the node, its
// transport, the join's rules, the checks), and the two steps every kind of
// member takes to make them from what a user gives: TLS from PEM files
// (UseTls) and the seeds from "host:port" lists (ResolvePeers).
// reckon-worker's flags (worker/daemon_flags.cc) and the Python module's
// keyword arguments (python/module.cc) both come here.
//
// Threads: plain data and functions, any thread.
#ifndef RECKON_WORKER_PEER_OPTIONS_H_
#define RECKON_WORKER_PEER_OPTIONS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/fault_link.h"
#include "server/grpc_transport.h"
#include "server/node.h"
#include "worker/metrics.h"

namespace reckon::worker {

struct PeerOptions {
  server::NodeOptions node;     // node_id, incarnation, seeds, fingerprint, timeouts
  server::FaultOptions faults;  // test only: links that misbehave (fault_link.h)
  std::string listen = "0.0.0.0:7070";
  std::string advertise;  // how peers reach us; default: listen, with this host's name
                          // in place of 0.0.0.0
  server::TransportOptions transport;
  uint64_t max_lag = 0;  // 0: never pause
  std::chrono::seconds quiesce_timeout{600};
  std::chrono::milliseconds join_probe_timeout{2000};
  // Start a new cluster from the seed's weights when no seed has trained,
  // even if some did not answer (the first worker of a cluster whose other
  // members are not up yet, with no way to know they will not have trained).
  bool bootstrap = false;
  // A first join may be a join by replay (see above; --join-by-replay).
  bool join_by_replay = true;
  // Join only from a seed that has applied at least this many messages,
  // never from the seed's weights, however the seeds answer (0: the rules
  // above). The workers other than shard 0's when the cluster pre-trains
  // (--pretrain-samples: 1, the start that shard 0 publishes, so no worker
  // steps from the seed's weights), and the workers that join after the
  // first-epoch warm-up (--start-workers: the warm-up's messages).
  uint64_t join_after_messages = 0;
  std::string join_after_why;            // for the log and the timeout's error
  std::chrono::seconds join_timeout{0};  // 0: probe for ever
  // The running replica check (docs/gossip.md "Divergence detection"):
  // this often at least, stretched so that it takes at most 1% of the time.
  // 0: never.
  std::chrono::milliseconds check_interval{2000};
  // Where the apply latency of peers' updates is recorded (null: nowhere).
  WorkerMetrics* metrics = nullptr;
  // Set (SIGTERM): every wait ends promptly. The join returns kCancelled;
  // Finish returns kCancelled when the cluster had not agreed yet (null:
  // never).
  const std::atomic<bool>* stop = nullptr;
};

// Mutual TLS and signed updates from PEM files (reckon-worker's --tls-ca,
// --tls-cert, --tls-key; a Python peer's tls_ca, tls_cert, tls_key): all
// three or none (none: nothing changes). The certificate must name the
// node id, or peers would refuse it. Errors call the files and the node id
// by the caller's names: kInvalidArgument for the flags (not all three, a
// certificate of another node), kFailedPrecondition for a file missing,
// unreadable or not a valid certificate or key.
struct TlsFiles {
  std::string ca, cert, key;
  std::string cert_name = "--tls-cert";
  std::string all_names = "--tls-cert, --tls-key and --tls-ca";
  std::string node_id_name = "--node-id";
};
absl::Status UseTls(const TlsFiles& files, PeerOptions* options);

// "host:port,host:port" (a host may be a DNS name resolving to several
// addresses, e.g. a Kubernetes headless Service): every address, as
// "ip:port". kInvalidArgument for an entry without a port.
absl::StatusOr<std::vector<std::string>> ResolvePeers(const std::string& list);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_PEER_OPTIONS_H_
