#include "server/member_links.h"

#include <algorithm>

#include "server/lanes.h"

namespace reckon::server {

void MemberLinks::Attach(std::shared_ptr<Link> link, uint32_t lanes_accepted,
                         Clock::time_point now) {
  if (stream_ && stream_ != link) stream_->Abort();
  DropLanes();
  stream_ = std::move(link);
  state_ = {};
  state_.attached = now;
  lanes_accepted_ = std::min(lanes_accepted, kMaxLanes);
}

void MemberLinks::Drop() {
  if (stream_) stream_->Abort();
  StreamClosed();
}

void MemberLinks::StreamClosed() {
  stream_.reset();
  state_ = {};
  DropLanes();
}

void MemberLinks::DropLanes() {
  for (auto& [index, lane] : out_lanes_) lane.link->Abort();
  for (auto& [index, lane] : in_lanes_) lane.link->Abort();
  out_lanes_.clear();
  in_lanes_.clear();
}

std::vector<std::shared_ptr<Link>> MemberLinks::All() const {
  std::vector<std::shared_ptr<Link>> all;
  if (stream_) all.push_back(stream_);
  for (const auto& [index, lane] : out_lanes_) all.push_back(lane.link);
  for (const auto& [index, lane] : in_lanes_) all.push_back(lane.link);
  return all;
}

std::optional<MemberLinks::Sent> MemberLinks::Send(std::shared_ptr<const v1::GossipFrame> frame,
                                                   size_t byte_cap, const LanePolicy& policy,
                                                   uint64_t turn) {
  if (!stream_) return std::nullopt;
  const size_t bytes = frame->ByteSizeLong();
  if (frame->has_heartbeat()) {
    if (!stream_->SendUrgent(std::move(frame), byte_cap)) return std::nullopt;
    return Sent{bytes, 0};
  }
  if (!frame->has_update()) {
    if (!stream_->Send(std::move(frame), byte_cap)) return std::nullopt;
    return Sent{bytes, 0};
  }
  const bool big = bytes >= policy.min_bytes;
  if (big && policy.lanes > 0) wants_lanes_ = true;
  uint32_t lane = 0;
  if (big && !out_lanes_.empty()) {  // small ones stay on the stream: no queue is read
    std::vector<std::optional<size_t>> queued(out_lanes_.rbegin()->first + 1);
    queued[0] = stream_->QueuedBytes();
    for (const auto& [index, l] : out_lanes_) {
      if (l.up) queued[index] = l.link->QueuedBytes();
    }
    lane = PickLane(bytes, policy.min_bytes, queued, turn);
  }
  Link& link = lane == 0 ? *stream_ : *out_lanes_[lane].link;
  if (!link.Send(std::move(frame), byte_cap)) return std::nullopt;
  // As the member counts: Updates only, per link.
  if (lane == 0) {
    ++state_.frames_sent;
  } else {
    ++out_lanes_[lane].frames;
  }
  return Sent{bytes, lane};
}

std::optional<MemberLinks::Sent> MemberLinks::SendUpdate(
    const OriginKey& origin, uint64_t seq, const std::shared_ptr<const v1::GossipFrame>& frame,
    size_t byte_cap, const LanePolicy& policy, uint64_t turn) {
  std::optional<Sent> sent = Send(frame, byte_cap, policy, turn);
  if (!sent) return std::nullopt;
  state_.pushed[origin] = seq;
  std::vector<uint64_t>& frontier = state_.pushed_frame[origin];
  frontier.assign(out_lanes_.empty() ? 1 : out_lanes_.rbegin()->first + 1, 0);
  frontier[0] = state_.frames_sent;
  for (const auto& [index, lane] : out_lanes_) frontier[index] = lane.frames;
  return sent;
}

void MemberLinks::ForgetLost(const VersionMap& applied, uint64_t frames_received,
                             const google::protobuf::RepeatedField<uint64_t>& lanes_received) {
  for (auto& [origin, seq] : state_.pushed) {
    const uint64_t theirs = SeqOf(applied, origin);
    auto frame = state_.pushed_frame.find(origin);
    if (theirs < seq && frame != state_.pushed_frame.end() &&
        ProcessedThrough(frame->second, frames_received, lanes_received)) {
      seq = theirs;
      state_.pushed_frame.erase(frame);
    }
  }
}

size_t MemberLinks::LeastQueued() const {
  size_t least = stream_ ? stream_->QueuedBytes() : 0;
  for (const auto& [index, lane] : out_lanes_) {
    if (lane.up) least = std::min(least, lane.link->QueuedBytes());
  }
  return least;
}

uint64_t MemberLinks::QueuedBytes() const {
  uint64_t queued = stream_ ? stream_->QueuedBytes() : 0;
  for (const auto& [index, lane] : out_lanes_) queued += lane.link->QueuedBytes();
  return queued;
}

void MemberLinks::CountReceived(uint32_t lane) {
  if (lane == 0) {
    ++state_.frames_received;
    return;
  }
  auto it = in_lanes_.find(lane);
  if (it != in_lanes_.end()) ++it->second.frames;
}

std::vector<uint64_t> MemberLinks::LaneFramesReceived() const {
  if (in_lanes_.empty()) return {};
  std::vector<uint64_t> frames(in_lanes_.rbegin()->first, 0);
  for (const auto& [index, lane] : in_lanes_) frames[index - 1] = lane.frames;
  return frames;
}

std::optional<MemberLinks::LaneRef> MemberLinks::FindLane(const Link* link) const {
  for (const auto& [index, lane] : out_lanes_) {
    if (lane.link.get() == link) return LaneRef{index, true};
  }
  for (const auto& [index, lane] : in_lanes_) {
    if (lane.link.get() == link) return LaneRef{index, false};
  }
  return std::nullopt;
}

void MemberLinks::LaneAnswered(uint32_t index) {
  auto it = out_lanes_.find(index);
  if (it != out_lanes_.end()) it->second.up = true;
}

bool MemberLinks::LaneUp(uint32_t index) const {
  auto it = out_lanes_.find(index);
  return it != out_lanes_.end() && it->second.up;
}

void MemberLinks::AcceptLane(uint32_t index, std::shared_ptr<Link> link, Clock::time_point now) {
  Lane& lane = in_lanes_[index];
  if (lane.link) lane.link->Abort();  // the member dialed that lane again
  lane = Lane{std::move(link), true, now, 0};
}

void MemberLinks::ForgetLane(const LaneRef& ref, Clock::time_point retry_at) {
  auto& lanes = ref.ours ? out_lanes_ : in_lanes_;
  auto it = lanes.find(ref.index);
  if (it == lanes.end()) return;
  it->second.link->Abort();
  lanes.erase(it);
  if (!ref.ours) return;
  // What went on it and was not processed is lost: served again from the
  // member's vector (what is merely late arrives as a duplicate, dropped).
  state_.ForgetPushed();
  lanes_after_ = retry_at;
}

std::vector<uint32_t> MemberLinks::LanesToDial(Clock::time_point now,
                                               Clock::time_point unanswered_before,
                                               const LanePolicy& policy) {
  for (auto& [index, lane] : out_lanes_) {
    if (!lane.up && lane.dialed_at < unanswered_before) lane.link->Abort();
  }
  std::vector<uint32_t> due;
  if (!stream_ || !wants_lanes_ || now < lanes_after_) return due;
  const uint32_t wanted = std::min({policy.lanes, lanes_accepted_, kMaxLanes});
  for (uint32_t index = 1; index <= wanted; ++index) {
    if (!out_lanes_.count(index)) due.push_back(index);
  }
  return due;
}

void MemberLinks::AddLane(uint32_t index, std::shared_ptr<Link> link, Clock::time_point now) {
  out_lanes_[index] = Lane{std::move(link), false, now, 0};
}

uint32_t MemberLinks::lanes_up() const {
  return static_cast<uint32_t>(std::count_if(out_lanes_.begin(), out_lanes_.end(),
                                             [](const auto& l) { return l.second.up; }));
}

}  // namespace reckon::server
