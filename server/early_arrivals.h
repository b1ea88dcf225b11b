// Early arrivals (docs/design.md: "early arrivals wait in a bounded buffer"):
// Updates whose seq is past the next one their origin needs, kept until the
// gap fills, so that delivery stays exactly once and in seq order per origin.
// Bounded twice, because a hostile peer chooses what it sends: per origin
// (the farthest seq goes first, it is the last one needed) and in bytes over
// all origins (a peer can invent origins). The bytes are the memory held
// (server/held_bytes.h: the frame, its decoded form and this buffer's own
// nodes, as the allocator hands them out), not the wire's: a onebit message
// decodes to 64 times its size, and a small one's allocations cost four.
//
// An origin the replica has never applied (it never reached seq 1) is held
// here only: the node counts such origins against its origin cap beside the
// applied ones (unapplied_origins), or invented origins at seq 2 would all
// be held without ever counting as origins.
//
// Not thread-safe: GossipNode owns one and calls it under its lock.
#ifndef RECKON_SERVER_EARLY_ARRIVALS_H_
#define RECKON_SERVER_EARLY_ARRIVALS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "codec/update_message.h"
#include "proto/reckon.pb.h"
#include "server/version_vector.h"

namespace reckon::server {

class EarlyArrivals {
 public:
  struct Arrival {
    std::shared_ptr<const v1::GossipFrame> frame;  // the received Update, validated
    std::shared_ptr<const codec::DecodedUpdate> decoded;
  };

  EarlyArrivals(size_t per_origin_cap, size_t byte_cap)
      : per_origin_cap_(per_origin_cap), byte_cap_(byte_cap) {}

  // What holding `arrival` costs: its frame, its decoded form and its node
  // here, as allocated.
  static size_t MemoryOf(const Arrival& arrival);
  // What holding anything of `origin` costs beside its arrivals.
  static size_t MemoryOfOrigin(const OriginKey& origin);

  bool Holds(const OriginKey& origin, uint64_t seq) const;
  bool HoldsOrigin(const OriginKey& origin) const { return held_.count(origin) > 0; }
  // Keeps `arrival` (its seq: `seq`) unless a cap says no: false when it was
  // not kept (the caller counts the drop). A full origin gives up its
  // farthest seq for a nearer one. `origin_applied`: whether the replica has
  // applied anything of `origin` (see unapplied_origins).
  bool Keep(const OriginKey& origin, uint64_t seq, Arrival arrival, bool origin_applied);
  // Whether the replica has applied anything of `origin` now (its first
  // message was applied, or a snapshot brought or dropped it): an applied
  // origin does not count among unapplied_origins.
  void SetOriginApplied(const OriginKey& origin, bool applied);
  // Forgets what `applied` made stale (seq <= applied) and hands out the
  // arrival that is next in line (seq == applied + 1), if held.
  std::optional<Arrival> TakeNext(const OriginKey& origin, uint64_t applied);
  // Origins with something held (for a snapshot's catch-up).
  std::vector<OriginKey> Origins() const;
  // Origins held here that the replica has not applied: with the applied
  // ones, what counts against the node's origin cap.
  size_t unapplied_origins() const { return unapplied_origins_; }
  size_t bytes() const { return bytes_; }  // memory held, at most byte_cap
  size_t size() const;

 private:
  struct Held {
    Arrival arrival;
    size_t bytes = 0;
  };
  struct OriginHeld {
    std::map<uint64_t, Held> arrivals;  // by seq
    bool unapplied = false;
    size_t bytes = 0;  // MemoryOfOrigin
  };
  using OriginIt = std::map<OriginKey, OriginHeld>::iterator;
  // Erases one arrival, and the origin when it was its last.
  void Erase(OriginIt origin, std::map<uint64_t, Held>::iterator it);
  void EraseOriginIfEmpty(OriginIt origin);

  const size_t per_origin_cap_;
  const size_t byte_cap_;
  std::map<OriginKey, OriginHeld> held_;
  size_t unapplied_origins_ = 0;
  size_t bytes_ = 0;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_EARLY_ARRIVALS_H_
