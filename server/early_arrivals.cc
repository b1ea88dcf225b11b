#include "server/early_arrivals.h"

#include <iterator>
#include <utility>
#include <vector>

#include "server/held_bytes.h"

namespace reckon::server {

bool EarlyArrivals::Holds(const OriginKey& origin, uint64_t seq) const {
  auto it = held_.find(origin);
  return it != held_.end() && it->second.arrivals.count(seq) > 0;
}

void EarlyArrivals::EraseOriginIfEmpty(OriginIt origin) {
  if (!origin->second.arrivals.empty()) return;
  bytes_ -= origin->second.bytes;
  if (origin->second.unapplied) --unapplied_origins_;
  held_.erase(origin);
}

void EarlyArrivals::Erase(OriginIt origin, std::map<uint64_t, Held>::iterator it) {
  bytes_ -= it->second.bytes;
  origin->second.arrivals.erase(it);
  EraseOriginIfEmpty(origin);
}

size_t EarlyArrivals::MemoryOf(const Arrival& arrival) {
  size_t bytes = HeldBytesOf(*arrival.frame) + TreeNodeBytes(sizeof(std::pair<const uint64_t, Held>));
  if (arrival.decoded != nullptr) bytes += HeldBytesOf(*arrival.decoded);
  return bytes;
}

size_t EarlyArrivals::MemoryOfOrigin(const OriginKey& origin) {
  return TreeNodeBytes(sizeof(std::pair<const OriginKey, OriginHeld>)) +
         HeapBytesOf(origin.node_id);
}

bool EarlyArrivals::Keep(const OriginKey& origin, uint64_t seq, Arrival arrival,
                         bool origin_applied) {
  auto o = held_.find(origin);
  const size_t origin_bytes = o == held_.end() ? MemoryOfOrigin(origin) : 0;
  const size_t bytes = MemoryOf(arrival);
  if (per_origin_cap_ == 0 || bytes + origin_bytes > byte_cap_) return false;
  if (o != held_.end() && o->second.arrivals.size() >= per_origin_cap_) {
    auto last = std::prev(o->second.arrivals.end());
    if (last->first < seq) return false;
    bytes_ -= last->second.bytes;
    o->second.arrivals.erase(last);  // the origin stays: this one takes its place
  }
  // Over the byte cap: make room from this origin's farthest, never from
  // another origin's (a flood from invented origins evicts only itself).
  while (bytes_ + bytes + origin_bytes > byte_cap_) {
    if (o == held_.end() || o->second.arrivals.empty()) {
      if (o != held_.end()) EraseOriginIfEmpty(o);
      return false;
    }
    auto last = std::prev(o->second.arrivals.end());
    if (last->first < seq) {
      EraseOriginIfEmpty(o);
      return false;
    }
    bytes_ -= last->second.bytes;
    o->second.arrivals.erase(last);
  }
  if (o == held_.end()) {
    o = held_.emplace(origin, OriginHeld{}).first;
    o->second.bytes = origin_bytes;
    o->second.unapplied = !origin_applied;
    if (!origin_applied) ++unapplied_origins_;
    bytes_ += origin_bytes;
  }
  o->second.arrivals.emplace(seq, Held{std::move(arrival), bytes});
  bytes_ += bytes;
  return true;
}

void EarlyArrivals::SetOriginApplied(const OriginKey& origin, bool applied) {
  auto o = held_.find(origin);
  if (o == held_.end() || o->second.unapplied == !applied) return;
  o->second.unapplied = !applied;
  if (applied) {
    --unapplied_origins_;
  } else {
    ++unapplied_origins_;
  }
}

std::optional<EarlyArrivals::Arrival> EarlyArrivals::TakeNext(const OriginKey& origin,
                                                              uint64_t applied) {
  auto o = held_.find(origin);
  if (o == held_.end()) return std::nullopt;
  std::map<uint64_t, Held>& arrivals = o->second.arrivals;
  while (!arrivals.empty() && arrivals.begin()->first <= applied) {
    bytes_ -= arrivals.begin()->second.bytes;
    arrivals.erase(arrivals.begin());
  }
  if (arrivals.empty()) {
    EraseOriginIfEmpty(o);
    return std::nullopt;
  }
  auto first = arrivals.begin();
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
  for (const auto& [origin, held] : held_) n += held.arrivals.size();
  return n;
}

}  // namespace reckon::server
