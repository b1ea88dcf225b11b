// Early arrivals (docs/design.md: "early arrivals wait in a bounded buffer"):
// Updates whose seq is past the next one their origin needs, kept until the
// gap fills, so that delivery stays exactly once and in seq order per origin.
// Bounded twice, because a hostile peer chooses what it sends: per origin
// (the farthest seq goes first, it is the last one needed) and in bytes over
// all origins (a peer can invent origins). The bytes are the memory held
// (MemoryOf: the frame and its decoded form), not the wire's: a onebit
// message decodes to 64 times its size.
//
// Not thread-safe: GossipNode owns one and calls it under its lock.
#ifndef RECKON_SERVER_EARLY_ARRIVALS_H_
#define RECKON_SERVER_EARLY_ARRIVALS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>

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

  // What holding `arrival` costs: its frame's bytes and its decoded words
  // and quanta.
  static size_t MemoryOf(const Arrival& arrival);

  bool Holds(const OriginKey& origin, uint64_t seq) const;
  // Keeps `arrival` (its seq: `seq`) unless a cap says no: false when it was
  // not kept (the caller counts the drop). A full origin gives up its
  // farthest seq for a nearer one.
  bool Keep(const OriginKey& origin, uint64_t seq, Arrival arrival);
  // Forgets what `applied` made stale (seq <= applied) and hands out the
  // arrival that is next in line (seq == applied + 1), if held.
  std::optional<Arrival> TakeNext(const OriginKey& origin, uint64_t applied);
  // Origins with something held (for a snapshot's catch-up).
  std::vector<OriginKey> Origins() const;
  size_t bytes() const { return bytes_; }  // memory held (MemoryOf), at most byte_cap
  size_t size() const;

 private:
  struct Held {
    Arrival arrival;
    size_t bytes = 0;
  };
  void Erase(std::map<OriginKey, std::map<uint64_t, Held>>::iterator origin,
             std::map<uint64_t, Held>::iterator it);

  const size_t per_origin_cap_;
  const size_t byte_cap_;
  std::map<OriginKey, std::map<uint64_t, Held>> held_;
  size_t bytes_ = 0;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_EARLY_ARRIVALS_H_
