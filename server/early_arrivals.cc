#include "server/early_arrivals.h"

#include <iterator>
#include <vector>

namespace reckon::server {

bool EarlyArrivals::Holds(const OriginKey& origin, uint64_t seq) const {
  auto it = held_.find(origin);
  return it != held_.end() && it->second.count(seq) > 0;
}

void EarlyArrivals::Erase(std::map<OriginKey, std::map<uint64_t, Held>>::iterator origin,
                          std::map<uint64_t, Held>::iterator it) {
  bytes_ -= it->second.bytes;
  origin->second.erase(it);
  if (origin->second.empty()) held_.erase(origin);
}

size_t EarlyArrivals::MemoryOf(const Arrival& arrival) {
  size_t bytes = arrival.frame->ByteSizeLong();
  if (arrival.decoded != nullptr) {
    bytes += sizeof(codec::DecodedUpdate) + arrival.decoded->node_id.size() +
             arrival.decoded->words.capacity() * sizeof(uint32_t) +
             arrival.decoded->quanta.capacity() * sizeof(int64_t);
  }
  return bytes;
}

bool EarlyArrivals::Keep(const OriginKey& origin, uint64_t seq, Arrival arrival) {
  const size_t bytes = MemoryOf(arrival);
  if (per_origin_cap_ == 0 || bytes > byte_cap_) return false;
  auto o = held_.find(origin);
  if (o != held_.end() && o->second.size() >= per_origin_cap_) {
    auto last = std::prev(o->second.end());
    if (last->first < seq) return false;
    Erase(o, last);
  }
  // Over the byte cap: make room from this origin's farthest, never from
  // another origin's (a flood from invented origins evicts only itself).
  o = held_.find(origin);
  while (bytes_ + bytes > byte_cap_) {
    if (o == held_.end() || o->second.empty()) return false;
    auto last = std::prev(o->second.end());
    if (last->first < seq) return false;
    Erase(o, last);
    o = held_.find(origin);
  }
  held_[origin].emplace(seq, Held{std::move(arrival), bytes});
  bytes_ += bytes;
  return true;
}

std::optional<EarlyArrivals::Arrival> EarlyArrivals::TakeNext(const OriginKey& origin,
                                                              uint64_t applied) {
  auto o = held_.find(origin);
  if (o == held_.end()) return std::nullopt;
  while (!o->second.empty() && o->second.begin()->first <= applied) {
    auto first = o->second.begin();
    bytes_ -= first->second.bytes;
    o->second.erase(first);
  }
  if (o->second.empty()) {
    held_.erase(o);
    return std::nullopt;
  }
  auto first = o->second.begin();
  if (first->first != applied + 1) return std::nullopt;
  Arrival out = std::move(first->second.arrival);
  Erase(o, first);
  return out;
}

std::vector<OriginKey> EarlyArrivals::Origins() const {
  std::vector<OriginKey> out;
  for (const auto& [origin, held] : held_) out.push_back(origin);
  return out;
}

size_t EarlyArrivals::size() const {
  size_t n = 0;
  for (const auto& [origin, held] : held_) n += held.size();
  return n;
}

}  // namespace reckon::server
