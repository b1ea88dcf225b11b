// The gossip node's counters (NodeCounters in proto/reckon.proto; what each
// counts is its metric help there), counted without the node's lock: one
// relaxed atomic per uint64 field, by field number, and per wire codec for
// the two maps (updates_received, update_bytes_received, labelled as
// /metrics shows them, codec::WireCodecLabel).
// Snapshot() builds the message that status, the summary and /metrics read
// by reflection.
//
// Threads: any thread; every method is lock-free. A snapshot taken while
// others count is each counter's value at some moment of the call
// (counters move independently).
#ifndef RECKON_SERVER_NODE_COUNTERS_H_
#define RECKON_SERVER_NODE_COUNTERS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "proto/reckon.pb.h"

namespace reckon::server {

class NodeCounterSet {
 public:
  // The largest field number a uint64 counter may have.
  static constexpr int kMaxField = 63;

  // Aborts when NodeCounters has a field this set cannot hold (a number
  // past kMaxField, or a type other than uint64 and map<string, uint64>):
  // a build mistake, caught by the first node made.
  NodeCounterSet();

  // `field`: a uint64 field's number (v1::NodeCounters::k...FieldNumber).
  void Add(int field, uint64_t n = 1) { values_[Checked(field)].fetch_add(n, kOrder); }
  void Set(int field, uint64_t value) { values_[Checked(field)].store(value, kOrder); }
  uint64_t Get(int field) const { return values_[Checked(field)].load(kOrder); }
  // An Update of `codec` received and accepted, `bytes` serialized.
  void AddReceived(v1::Codec codec, uint64_t bytes);

  v1::NodeCounters Snapshot() const;

 private:
  static constexpr std::memory_order kOrder = std::memory_order_relaxed;
  // A field number that is not a uint64 counter is the caller's mistake
  // (the numbers are constants): aborts.
  int Checked(int field) const {
    if (field < 1 || field > kMaxField || ((counter_fields_ >> field) & 1) == 0) {
      Abort("is not a uint64 counter of NodeCounters", field);
    }
    return field;
  }
  // Prints "NodeCounters field <field> <why>" and aborts.
  [[noreturn]] static void Abort(const char* why, int field);

  uint64_t counter_fields_ = 0;  // bit n: field n is a uint64 counter

  std::array<std::atomic<uint64_t>, kMaxField + 1> values_{};
  // By v1::Codec value; a codec past kCodecs (none today) counts in the
  // last slot, labelled by its number.
  static constexpr int kCodecs = 16;
  std::array<std::atomic<uint64_t>, kCodecs> received_{}, received_bytes_{};
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_NODE_COUNTERS_H_
