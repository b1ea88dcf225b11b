#include "server/message_log.h"

#include "server/held_bytes.h"

namespace reckon::server {

size_t MessageLog::MemoryOf(const OriginKey& origin, const v1::GossipFrame& frame) {
  // The order record is a copy of the key in a deque block.
  return HeldBytesOf(frame) + TreeNodeBytes(sizeof(Entries::value_type)) +
         sizeof(std::pair<OriginKey, uint64_t>) + HeapBytesOf(origin.node_id);
}

size_t MessageLog::MemoryOfOrigin(const OriginKey& origin) {
  return TreeNodeBytes(sizeof(std::map<OriginKey, Entries>::value_type)) +
         HeapBytesOf(origin.node_id);
}

void MessageLog::Add(const OriginKey& origin, std::shared_ptr<const v1::GossipFrame> frame,
                     Clock::time_point now) {
  const uint64_t seq = frame->update().seq();
  const size_t bytes = MemoryOf(origin, *frame);
  auto [log, added] = log_.try_emplace(origin);
  if (added) bytes_ += MemoryOfOrigin(origin);
  Entries& entries = log->second;
  if (auto old = entries.find(seq); old != entries.end()) bytes_ -= old->second.bytes;
  entries[seq] = Entry{std::move(frame), bytes, now};
  order_.emplace_back(origin, seq);
  bytes_ += bytes;
  while (bytes_ > byte_cap_ && !order_.empty()) {
    auto [o, s] = order_.front();
    order_.pop_front();
    auto it = log_.find(o);
    if (it == log_.end()) continue;
    auto e = it->second.find(s);
    if (e != it->second.end()) Erase(o, e);
  }
}

void MessageLog::Erase(const OriginKey& origin, Entries::iterator it) {
  auto log = log_.find(origin);
  bytes_ -= it->second.bytes;
  log->second.erase(it);
  if (log->second.empty()) {
    bytes_ -= MemoryOfOrigin(origin);
    log_.erase(log);
  }
}

void MessageLog::Collect(const VersionMap& floor, Clock::time_point now) {
  for (auto it = log_.begin(); it != log_.end();) {
    const uint64_t below = SeqOf(floor, it->first);
    Entries& entries = it->second;
    while (!entries.empty() && entries.begin()->first <= below &&
           now - entries.begin()->second.added > min_retention_) {
      bytes_ -= entries.begin()->second.bytes;
      entries.erase(entries.begin());
    }
    if (entries.empty()) {
      bytes_ -= MemoryOfOrigin(it->first);
      it = log_.erase(it);
    } else {
      ++it;
    }
  }
  // Forget order records of what is gone (they would only be skipped).
  while (!order_.empty()) {
    auto it = log_.find(order_.front().first);
    if (it != log_.end() && it->second.count(order_.front().second)) break;
    order_.pop_front();
  }
}

const MessageLog::Entries* MessageLog::Find(const OriginKey& origin) const {
  auto it = log_.find(origin);
  return it == log_.end() ? nullptr : &it->second;
}

size_t MessageLog::messages() const {
  size_t n = 0;
  for (const auto& [origin, entries] : log_) n += entries.size();
  return n;
}

}  // namespace reckon::server
