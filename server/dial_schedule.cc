#include "server/dial_schedule.h"

#include <algorithm>

namespace reckon::server {

DialSchedule::DialSchedule(Options options, uint64_t jitter_seed)
    : options_(options), jitter_(jitter_seed) {}

bool DialSchedule::Learn(const std::string& address, Clock::time_point now) {
  if (address.empty() || self_.count(address) || targets_.count(address) ||
      refused_.count(address)) {
    return true;
  }
  if (targets_.size() >= options_.max_targets) return false;
  targets_[address].next_attempt = now;
  return true;
}

std::shared_ptr<Link> DialSchedule::Forget(const std::string& address) {
  auto it = targets_.find(address);
  if (it == targets_.end() || pinned_.count(address)) return nullptr;
  std::shared_ptr<Link> pending = std::move(it->second.pending);
  targets_.erase(it);
  return pending;
}

void DialSchedule::MarkSelf(const std::string& address) {
  self_.insert(address);
  targets_.erase(address);
}

std::vector<std::string> DialSchedule::Due(
    Clock::time_point now, const std::function<bool(const std::string&)>& connected) {
  std::vector<std::string> due;
  size_t in_flight = 0;
  for (const auto& [address, target] : targets_) in_flight += target.pending != nullptr;
  // Round robin: from the address after the one last handed out, around.
  auto start = targets_.upper_bound(resume_after_);
  for (size_t n = 0; n < targets_.size(); ++n, ++start) {
    if (start == targets_.end()) start = targets_.begin();
    auto& [address, target] = *start;
    if (target.pending || now < target.next_attempt || connected(address)) continue;
    if (in_flight + due.size() >= options_.max_in_flight) {
      ++deferred_;
      continue;
    }
    target.backoff = target.backoff.count() == 0
                         ? options_.initial_backoff
                         : std::min(options_.max_backoff, target.backoff * 2);
    // +-25% jitter, so restarted peers do not all dial in step.
    const double j = std::uniform_real_distribution<double>(0.75, 1.25)(jitter_);
    target.next_attempt = now + std::chrono::duration_cast<Clock::duration>(target.backoff * j);
    due.push_back(address);
    resume_after_ = address;
  }
  return due;
}

void DialSchedule::Dialed(const std::string& address, std::shared_ptr<Link> link,
                          Clock::time_point now) {
  auto it = targets_.find(address);
  if (it == targets_.end()) return;
  it->second.pending = std::move(link);
  it->second.pending_since = now;
}

std::string DialSchedule::Handshaken(const std::shared_ptr<Link>& link,
                                     const std::string& node_id) {
  for (auto& [address, target] : targets_) {
    if (target.pending == link) {
      target.pending.reset();
      target.backoff = std::chrono::milliseconds(0);
      target.member = node_id;
      return address;
    }
  }
  return "";
}

void DialSchedule::ReachedMember(const std::shared_ptr<Link>& link, const std::string& node_id) {
  for (auto& [address, target] : targets_) {
    if (target.pending == link) target.member = node_id;
  }
}

const std::string& DialSchedule::MemberAt(const std::string& address) const {
  static const std::string* const kNone = new std::string();
  auto it = targets_.find(address);
  return it == targets_.end() ? *kNone : it->second.member;
}

std::string DialSchedule::Refused(const std::shared_ptr<Link>& link) {
  for (auto it = targets_.begin(); it != targets_.end(); ++it) {
    if (it->second.pending == link) {
      std::string address = it->first;
      targets_.erase(it);
      pinned_.erase(address);
      if (refused_.size() < options_.max_targets) refused_.insert(address);
      return address;
    }
  }
  return "";
}

void DialSchedule::DialedSelf(const std::shared_ptr<Link>& link) {
  for (auto it = targets_.begin(); it != targets_.end(); ++it) {
    if (it->second.pending == link) {
      self_.insert(it->first);
      targets_.erase(it);
      return;
    }
  }
}

void DialSchedule::Closed(const std::shared_ptr<Link>& link) {
  for (auto& [address, target] : targets_) {
    if (target.pending == link) target.pending.reset();
  }
}

std::vector<DialSchedule::Expired> DialSchedule::TakeExpired(Clock::time_point now) {
  std::vector<Expired> out;
  for (auto& [address, target] : targets_) {
    if (target.pending && now - target.pending_since > options_.deadline) {
      out.push_back({address, std::move(target.pending), now - target.pending_since});
      target.pending.reset();
    }
  }
  return out;
}

std::vector<std::shared_ptr<Link>> DialSchedule::Pending() const {
  std::vector<std::shared_ptr<Link>> out;
  for (const auto& [address, target] : targets_) {
    if (target.pending) out.push_back(target.pending);
  }
  return out;
}

}  // namespace reckon::server
