#include "server/lanes.h"

#include "absl/strings/str_cat.h"

namespace reckon::server {

std::optional<HelloVerdict> LaneRefusal(const v1::Hello& hello, const MemberMap& members) {
  const std::string& id = hello.self().node_id();
  auto refuse = [](std::string reason, int counter) {
    return HelloVerdict{HelloVerdict::kRefuse, std::move(reason), false, counter};
  };
  if (hello.lane() > kMaxLanes) {
    return refuse(
        absl::StrCat("lane ", hello.lane(), " is past the most a pair may have, ", kMaxLanes),
        v1::NodeCounters::kPeersRefusedFieldNumber);
  }
  auto known = members.find(id);
  if (known == members.end() || !known->second.links.connected() ||
      known->second.state() != MemberState::kAlive) {
    return refuse(absl::StrCat("a lane of node '", id.substr(0, 64),
                               "', whose stream with this node is not up"),
                  v1::NodeCounters::kPeersRefusedForNowFieldNumber);
  }
  if (hello.self().incarnation() != known->second.incarnation) {
    return refuse(absl::StrCat("a lane of incarnation ", hello.self().incarnation(), " of node '",
                               id, "', whose stream with this node is of incarnation ",
                               known->second.incarnation),
                  v1::NodeCounters::kPeersRefusedForNowFieldNumber);
  }
  return std::nullopt;
}

uint32_t PickLane(size_t bytes, size_t min_bytes, const std::vector<std::optional<size_t>>& queued,
                  uint64_t turn) {
  if (bytes < min_bytes || queued.empty()) return 0;
  std::optional<uint32_t> best;
  for (size_t k = 0; k < queued.size(); ++k) {
    const auto i = static_cast<uint32_t>((turn + k) % queued.size());
    if (queued[i] && (!best || *queued[i] < *queued[*best])) best = i;
  }
  return best.value_or(0);
}

bool ProcessedThrough(const std::vector<uint64_t>& frontier, uint64_t stream_received,
                      const google::protobuf::RepeatedField<uint64_t>& lanes_received) {
  for (size_t i = 0; i < frontier.size(); ++i) {
    uint64_t received = 0;
    if (i == 0) {
      received = stream_received;
    } else if (static_cast<int>(i) - 1 < lanes_received.size()) {
      received = lanes_received[static_cast<int>(i) - 1];
    }
    if (received < frontier[i]) return false;
  }
  return true;
}

}  // namespace reckon::server
