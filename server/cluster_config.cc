#include "server/cluster_config.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "base/wall_clock.h"

namespace reckon::server {

v1::ClusterFingerprint MakeFingerprint(const ClusterSpec& spec) {
  v1::ClusterFingerprint f;
  f.set_model(spec.model);
  f.set_param_count(spec.param_count);
  f.set_fraction_bits(spec.fraction_bits);
  f.set_codec(spec.wire_codec);
  f.set_seed(spec.seed);
  f.set_protocol_version(kProtocolVersion);
  f.set_data(spec.data);
  f.set_pretrain_samples(spec.pretrain_samples);
  f.set_overlay(spec.overlay);
  return f;
}

uint64_t NewIncarnation() { return static_cast<uint64_t>(base::UnixNanos()); }

absl::Status SetNodeTimings(int64_t heartbeat_ms, int64_t failure_timeout_ms,
                            const TimingNames& names, NodeOptions* node) {
  if (heartbeat_ms < 1 || failure_timeout_ms < 2 * heartbeat_ms) {
    return absl::InvalidArgumentError(absl::StrCat(names.heartbeat, " ", heartbeat_ms,
                                                   " must be >= 1 and ", names.failure_timeout,
                                                   " at least twice it"));
  }
  node->heartbeat_interval = std::chrono::milliseconds(heartbeat_ms);
  node->failure_timeout = std::chrono::milliseconds(failure_timeout_ms);
  node->repair_timeout = std::chrono::milliseconds(std::max<int64_t>(5 * heartbeat_ms, 200));
  return absl::OkStatus();
}

}  // namespace reckon::server
