// What makes a node a member of one cluster, made in one place for every
// kind of member: reckon-worker (worker/daemon_flags.cc), the Python module's
// flat peer (python/module.cc), the benches and the tests.
//
//   - the fingerprint every member must share (the handshake compares it
//     whole; docs/protocol.md "Hello"): MakeFingerprint;
//   - the incarnation each process start makes new: NewIncarnation;
//   - the node's timings and the rule between them: SetNodeTimings.
//
// Threads: plain functions, any thread. Errors: kInvalidArgument naming the
// caller's own names for the values (a flag, a keyword argument).
#ifndef RECKON_SERVER_CLUSTER_CONFIG_H_
#define RECKON_SERVER_CLUSTER_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/reckon.pb.h"
#include "server/node_options.h"

namespace reckon::server {

// The protocol this build speaks (ClusterFingerprint.protocol_version).
inline constexpr uint32_t kProtocolVersion = 1;

// What the members of a cluster share: the model, its fixed point and wire,
// the seed of the initial weights, the data, how messages travel.
struct ClusterSpec {
  std::string model;  // ModelShape::ToString(), or a framework's own name
  uint64_t param_count = 0;
  int fraction_bits = 0;
  v1::Codec wire_codec = v1::CODEC_THRESHOLD_RICE;
  uint64_t seed = 0;
  // worker/data_identity.h of the training data; "synthetic"; empty: not
  // said (a framework's peer that was not given its data's identity).
  std::string data;
  uint64_t pretrain_samples = 0;
  v1::GossipOverlay overlay = v1::GOSSIP_OVERLAY_MESH;
};

v1::ClusterFingerprint MakeFingerprint(const ClusterSpec& spec);

// A new incarnation for a process start: wall-clock nanoseconds, which grow
// across restarts of one worker (a restarted node id is a new origin whose
// incarnation is above its earlier lives').
uint64_t NewIncarnation();

// The names a caller gives its timing values in errors ("--heartbeat-ms",
// or a Python keyword "heartbeat_ms").
struct TimingNames {
  std::string heartbeat;
  std::string failure_timeout;
};

// Sets the node's heartbeat interval, failure timeout and repair timeout
// (5 heartbeats, at least 200 ms). kInvalidArgument unless heartbeat_ms >= 1
// and the failure timeout is at least two heartbeats (one lost heartbeat is
// not a death).
absl::Status SetNodeTimings(int64_t heartbeat_ms, int64_t failure_timeout_ms,
                            const TimingNames& names, NodeOptions* node);

}  // namespace reckon::server

#endif  // RECKON_SERVER_CLUSTER_CONFIG_H_
