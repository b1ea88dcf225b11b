#include "server/node_counters.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "codec/codec.h"

namespace reckon::server {
namespace {

using google::protobuf::FieldDescriptor;

bool IsCounter(const FieldDescriptor* f) {
  return f->cpp_type() == FieldDescriptor::CPPTYPE_UINT64 && !f->is_repeated();
}

bool IsCodecMap(const FieldDescriptor* f) {
  return f->is_map() &&
         f->message_type()->map_key()->cpp_type() == FieldDescriptor::CPPTYPE_STRING &&
         f->message_type()->map_value()->cpp_type() == FieldDescriptor::CPPTYPE_UINT64;
}

}  // namespace

NodeCounterSet::NodeCounterSet() {
  const google::protobuf::Descriptor* d = v1::NodeCounters::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (IsCounter(f) && f->number() <= kMaxField) {
      counter_fields_ |= uint64_t{1} << f->number();
    } else if (!IsCodecMap(f)) {
      Abort("is neither a uint64 counter numbered up to kMaxField nor a map<string, uint64>",
            f->number());
    }
  }
}

void NodeCounterSet::Abort(const char* why, int field) {
  std::fprintf(stderr, "NodeCounters field %d %s\n", field, why);
  std::abort();
}

void NodeCounterSet::AddReceived(v1::Codec codec, uint64_t bytes) {
  const int slot = std::clamp(static_cast<int>(codec), 0, kCodecs - 1);
  received_[slot].fetch_add(1, kOrder);
  received_bytes_[slot].fetch_add(bytes, kOrder);
}

v1::NodeCounters NodeCounterSet::Snapshot() const {
  v1::NodeCounters out;
  const google::protobuf::Descriptor* d = out.GetDescriptor();
  const google::protobuf::Reflection* r = out.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (IsCounter(f)) r->SetUInt64(&out, f, values_[f->number()].load(kOrder));
  }
  for (int slot = 0; slot < kCodecs; ++slot) {
    const uint64_t n = received_[slot].load(kOrder);
    if (n == 0) continue;
    const std::string label = codec::WireCodecLabel(static_cast<v1::Codec>(slot));
    (*out.mutable_updates_received())[label] = n;
    (*out.mutable_update_bytes_received())[label] = received_bytes_[slot].load(kOrder);
  }
  return out;
}

}  // namespace reckon::server
