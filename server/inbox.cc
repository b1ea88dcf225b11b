#include "server/inbox.h"

#include "server/held_bytes.h"

#include <algorithm>
#include <utility>

#include "absl/time/time.h"
#include "codec/update_message.h"

namespace reckon::server {

void Inbox::PushUp(const std::shared_ptr<Link>& link) {
  absl::MutexLock l(&mu_);
  events_.push_back(Event{Event::kUp, link, {}, {}, 0, std::nullopt});
  ++events_in_;
  cv_.Signal();
}

size_t Inbox::MemoryOf(const v1::GossipFrame& frame) {
  return HeldBytesOf(frame) + sizeof(Event) - sizeof(v1::GossipFrame);
}

bool Inbox::PushFrame(const std::shared_ptr<Link>& link, v1::GossipFrame frame) {
  const size_t frame_bytes = frame.ByteSizeLong();
  const size_t held = MemoryOf(frame);
  absl::MutexLock l(&mu_);
  last_arrival_[link.get()] = clock_();
  events_.push_back(Event{Event::kFrame, link, std::move(frame), {}, frame_bytes, std::nullopt});
  ++events_in_;
  cv_.Signal();
  bytes_ += held;
  size_t& mine = link_bytes_[link.get()];
  mine += held;
  const size_t share = byte_cap_ / link_bytes_.size();
  if (mine <= share) return true;
  paused_.push_back(link);
  ++pauses_;
  return false;
}

void Inbox::PushClosed(const std::shared_ptr<Link>& link, const std::string& why) {
  absl::MutexLock l(&mu_);
  if (stopped_) closed_since_stop_.insert(link.get());
  events_.push_back(Event{Event::kClosed, link, {}, why, 0, std::nullopt});
  ++events_in_;
  cv_.Signal();
}

void Inbox::Wake() {
  absl::MutexLock l(&mu_);
  woken_ = true;
  cv_.Signal();
}

bool Inbox::Take(Clock::time_point wake, Batch* out) {
  absl::MutexLock l(&mu_);
  wake_ = wake;
  while (events_.empty() && !stopped_ && !woken_) {
    const auto now = clock_();
    if (now >= wake) break;
    waiting_ = true;
    cv_.WaitWithTimeout(&mu_, absl::FromChrono(std::min<Clock::duration>(wake - now, max_wait_)));
  }
  waiting_ = false;
  if (stopped_) return false;
  woken_ = false;
  out->events.swap(events_);
  out->to_resume.swap(paused_);
  bytes_ = 0;
  link_bytes_.clear();
  return true;
}

std::optional<uint64_t> Inbox::IdleForTesting() {
  absl::MutexLock l(&mu_);
  const bool idle = stopped_ || (waiting_ && events_.empty() && !woken_ && clock_() < wake_);
  if (!idle) return std::nullopt;
  return events_in_;
}

void Inbox::Stop() {
  absl::MutexLock l(&mu_);
  stopped_ = true;
  cv_.SignalAll();
}

bool Inbox::ClosedSinceStop(const std::vector<std::shared_ptr<Link>>& links) {
  absl::MutexLock l(&mu_);
  for (const auto& link : links) {
    if (!closed_since_stop_.count(link.get())) return false;
  }
  return true;
}

std::map<const Link*, Clock::time_point> Inbox::LastArrivals() {
  absl::MutexLock l(&mu_);
  return last_arrival_;
}

void Inbox::Forget(const Link* link) {
  absl::MutexLock l(&mu_);
  last_arrival_.erase(link);
}

size_t Inbox::bytes() {
  absl::MutexLock l(&mu_);
  return bytes_;
}

uint64_t Inbox::pauses() {
  absl::MutexLock l(&mu_);
  return pauses_;
}

namespace {

size_t DecodedBytes(const Inbox::Event& e, uint64_t param_count) {
  if (e.kind != Inbox::Event::kFrame || !e.frame.has_update()) return 0;
  const v1::Update& u = e.frame.update();
  if (codec::IsQuantaCodec(u.codec())) return param_count * sizeof(int64_t);
  return std::min<uint64_t>(u.count(), param_count) * sizeof(uint32_t);
}

}  // namespace

Slice TakeSlice(std::deque<Inbox::Event>* events, uint64_t param_count, size_t decoded_cap) {
  Slice slice;
  while (!events->empty()) {
    const size_t bytes = DecodedBytes(events->front(), param_count);
    if (!slice.events.empty() && slice.decoded_bytes + bytes > decoded_cap) break;
    slice.decoded_bytes += bytes;
    slice.events.push_back(std::move(events->front()));
    events->pop_front();
  }
  return slice;
}

}  // namespace reckon::server
