#include "server/held_bytes.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/unknown_field_set.h"

namespace reckon::server {

namespace {

constexpr size_t kMmapThreshold = size_t{128} << 10;
constexpr size_t kSharedControlBlock = 16;  // make_shared's counts and vtable pointer

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// The allocator's headers and rounding for what a message owns beyond
// itself (protobuf's SpaceUsedLong counts the bytes asked for, not the
// chunks): one allocation a set sub-message, string object and heap string
// buffer, repeated field's array, and unknown-field set.
size_t AllocationOverhead(const Message& m) {
  constexpr size_t kPerAllocation = 16;  // 8-byte header, 8 of rounding on average
  const Reflection* reflection = m.GetReflection();
  size_t overhead = 0;
  if (!reflection->GetUnknownFields(m).empty()) overhead += 2 * kPerAllocation;
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    const bool is_message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    const bool is_string = f->cpp_type() == FieldDescriptor::CPPTYPE_STRING;
    if (f->is_repeated()) {
      const int n = reflection->FieldSize(m, f);
      overhead += kPerAllocation;  // the array
      for (int i = 0; i < n; ++i) {
        if (is_message) {
          overhead += kPerAllocation + AllocationOverhead(reflection->GetRepeatedMessage(m, f, i));
        } else if (is_string) {
          std::string scratch;
          const std::string& s = reflection->GetRepeatedStringReference(m, f, i, &scratch);
          overhead += kPerAllocation + (s.size() > 15 ? kPerAllocation : 0);
        }
      }
    } else if (is_message) {
      overhead += kPerAllocation + AllocationOverhead(reflection->GetMessage(m, f));
    } else if (is_string) {
      std::string scratch;
      const std::string& s = reflection->GetStringReference(m, f, &scratch);
      overhead += kPerAllocation + (s.size() > 15 ? kPerAllocation : 0);
    }
  }
  return overhead;
}

}  // namespace

size_t HeapBytes(size_t requested) {
  if (requested == 0) return 0;
  if (requested >= kMmapThreshold) return (requested + 16 + 4095) & ~size_t{4095};
  return std::max<size_t>(32, (requested + 8 + 15) & ~size_t{15});
}

size_t HeapBytesOf(const std::string& s) {
  return s.capacity() > 15 ? HeapBytes(s.capacity() + 1) : 0;
}

namespace {

// A string field set to `s`: protobuf keeps a std::string object of its own
// on the heap, and its buffer beside it unless it is kept inside.
size_t StringField(const std::string& s) {
  return s.empty() ? 0 : HeapBytes(sizeof(std::string)) + HeapBytesOf(s);
}


// No unknown fields (what a peer appended is counted by reflection).
bool Plain(const google::protobuf::Message& m) {
  return m.GetReflection()->GetUnknownFields(m).empty();
}

// A version vector's entries, each a VersionEntry with its Origin and the
// origin's node id; false when one carries unknown fields (then the caller
// counts by reflection).
bool VectorBytes(const v1::VersionVector& v, size_t* bytes) {
  if (!Plain(v)) return false;
  *bytes += HeapBytes(sizeof(v1::VersionVector)) +
            HeapBytes(sizeof(void*) * (static_cast<size_t>(v.entries().Capacity()) + 1));
  for (const v1::VersionEntry& e : v.entries()) {
    if (!Plain(e)) return false;
    *bytes += HeapBytes(sizeof(v1::VersionEntry));
    if (e.has_origin()) {
      if (!Plain(e.origin())) return false;
      *bytes += HeapBytes(sizeof(v1::Origin)) + StringField(e.origin().node_id());
    }
  }
  return true;
}

// An Update frame without reflection, or nullopt when anything in it
// carries unknown fields.
std::optional<size_t> UpdateBytes(const v1::GossipFrame& frame) {
  const v1::Update& update = frame.update();
  if (!Plain(frame) || !Plain(update) || (update.has_origin() && !Plain(update.origin()))) {
    return std::nullopt;
  }
  size_t bytes = HeapBytes(kSharedControlBlock + sizeof(v1::GossipFrame)) +
                 HeapBytes(sizeof(v1::Update)) + StringField(update.payload()) +
                 StringField(update.signature());
  if (update.has_origin()) {
    bytes += HeapBytes(sizeof(v1::Origin)) + StringField(update.origin().node_id());
  }
  return bytes;
}

// A Heartbeat frame without reflection (its vectors hold thousands of
// entries), or nullopt when anything in it carries unknown fields.
std::optional<size_t> HeartbeatBytes(const v1::GossipFrame& frame) {
  const v1::Heartbeat& h = frame.heartbeat();
  if (!Plain(frame) || !Plain(h)) return std::nullopt;
  size_t bytes = HeapBytes(kSharedControlBlock + sizeof(v1::GossipFrame)) +
                 HeapBytes(sizeof(v1::Heartbeat)) + StringField(h.weight_hash());
  if (h.has_applied() && !VectorBytes(h.applied(), &bytes)) return std::nullopt;
  if (h.has_checked() && !VectorBytes(h.checked(), &bytes)) return std::nullopt;
  if (h.members_size() > 0) {
    bytes += HeapBytes(sizeof(void*) * (static_cast<size_t>(h.members().Capacity()) + 1));
  }
  for (const v1::Member& m : h.members()) {
    if (!Plain(m)) return std::nullopt;
    bytes += HeapBytes(sizeof(v1::Member)) + StringField(m.node_id()) + StringField(m.address());
  }
  if (h.lane_frames_received_size() > 0) {
    bytes += HeapBytes(sizeof(uint64_t) * static_cast<size_t>(h.lane_frames_received().Capacity()));
  }
  return bytes;
}

}  // namespace

size_t HeldBytesOf(const v1::GossipFrame& frame) {
  // The frames held by count (Updates, in the log and the early arrivals,
  // and most of the inbox's; heartbeats, whose vectors hold thousands of
  // entries) without reflection, which costs about 650 ns an Update on the
  // receive path; what has unknown fields, or is anything else, through
  // SpaceUsedLong. tests/server/ (held_bytes, early_arrivals, message_log) checks both against mallinfo2.
  std::optional<size_t> fast;
  if (frame.has_update()) fast = UpdateBytes(frame);
  if (frame.has_heartbeat()) fast = HeartbeatBytes(frame);
  if (fast) return *fast;
  const size_t owned = frame.SpaceUsedLong() - sizeof(v1::GossipFrame);
  return HeapBytes(kSharedControlBlock + sizeof(v1::GossipFrame)) + owned +
         AllocationOverhead(frame);
}

size_t HeldBytesOf(const codec::DecodedUpdate& decoded) {
  return HeapBytes(kSharedControlBlock + sizeof(codec::DecodedUpdate)) +
         HeapBytesOf(decoded.node_id) + HeapBytes(decoded.words.capacity() * sizeof(uint32_t)) +
         HeapBytes(decoded.quanta.capacity() * sizeof(int64_t)) + HeapBytesOf(decoded.dense_fp32);
}

}  // namespace reckon::server
