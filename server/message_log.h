// The node's log of recent messages, its own and every other origin's: what
// anti-entropy serves a peer that lacks them and what a re-join replays on
// top of a snapshot (docs/design.md "Anti-entropy", "Log retention is bounded").
//
// Not thread-safe: GossipNode owns one and calls it under its lock, from its
// node thread and from the training thread (Publish).
#ifndef RECKON_SERVER_MESSAGE_LOG_H_
#define RECKON_SERVER_MESSAGE_LOG_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>

#include "proto/reckon.pb.h"
#include "server/version_vector.h"

namespace reckon::server {

using Clock = std::chrono::steady_clock;

class MessageLog {
 public:
  struct Entry {
    std::shared_ptr<const v1::GossipFrame> frame;  // the Update, ready to send
    size_t bytes = 0;  // MemoryOf
    Clock::time_point added;
  };
  using Entries = std::map<uint64_t, Entry>;  // by seq

  // What an entry costs as allocated (server/held_bytes.h): its frame, its
  // node here and its record in the eviction order; and what an origin
  // costs beside its entries.
  static size_t MemoryOf(const OriginKey& origin, const v1::GossipFrame& frame);
  static size_t MemoryOfOrigin(const OriginKey& origin);

  // `byte_cap`: the most memory kept (MemoryOf); past it the oldest go first, even when
  // a live peer still needs them (that peer is then told to re-join from a
  // snapshot). `min_retention`: how long a message stays at least once every
  // live member applied it, so that a worker joining from a snapshot cut a
  // moment ago still finds what came after its cut.
  MessageLog(size_t byte_cap, std::chrono::milliseconds min_retention)
      : byte_cap_(byte_cap), min_retention_(min_retention) {}

  // REQUIRES: `frame` holds an Update of `origin`; adding a seq twice
  // replaces it.
  void Add(const OriginKey& origin, std::shared_ptr<const v1::GossipFrame> frame,
           Clock::time_point now);
  // Drops, per origin, the messages with seq <= floor[origin] older than the
  // minimum retention (the floor: the least any live member applied; an
  // origin absent from `floor` keeps everything).
  void Collect(const VersionMap& floor, Clock::time_point now);

  // nullptr when nothing of `origin` is held.
  const Entries* Find(const OriginKey& origin) const;
  const std::map<OriginKey, Entries>& origins() const { return log_; }
  size_t bytes() const { return bytes_; }  // memory held (MemoryOf, MemoryOfOrigin)
  size_t messages() const;

 private:
  void Erase(const OriginKey& origin, Entries::iterator it);

  const size_t byte_cap_;
  const std::chrono::milliseconds min_retention_;
  std::map<OriginKey, Entries> log_;
  std::deque<std::pair<OriginKey, uint64_t>> order_;  // insertion order, for the cap
  size_t bytes_ = 0;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_MESSAGE_LOG_H_
