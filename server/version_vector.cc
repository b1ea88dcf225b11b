#include "server/version_vector.h"

#include "absl/strings/str_cat.h"
#include "base/json.h"

namespace reckon::server {

std::string OriginKey::ToString() const { return absl::StrCat(node_id, "#", incarnation); }

OriginKey KeyOf(const v1::Origin& origin) { return {origin.node_id(), origin.incarnation()}; }

void ToProto(const VersionMap& map, v1::VersionVector* out) {
  out->Clear();
  for (const auto& [origin, seq] : map) {
    v1::VersionEntry* e = out->add_entries();
    e->mutable_origin()->set_node_id(origin.node_id);
    e->mutable_origin()->set_incarnation(origin.incarnation);
    e->set_seq(seq);
  }
}

VersionMap FromProto(const v1::VersionVector& vv) {
  VersionMap map;
  for (const v1::VersionEntry& e : vv.entries()) {
    uint64_t& seq = map[KeyOf(e.origin())];
    seq = std::max(seq, e.seq());
  }
  return map;
}

absl::Status CheckOrigins(const v1::VersionVector& vv, size_t max_origins) {
  if (static_cast<size_t>(vv.entries_size()) <= max_origins) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("a version vector of ", vv.entries_size(),
                                                 " entries: more than the ", max_origins,
                                                 " origins a vector may name (--max-origins, plus the members)"));
}

uint64_t SeqOf(const VersionMap& map, const OriginKey& origin) {
  auto it = map.find(origin);
  return it == map.end() ? 0 : it->second;
}

bool SameVersions(const VersionMap& a, const VersionMap& b) {
  for (const auto& [origin, seq] : a) {
    if (SeqOf(b, origin) != seq) return false;
  }
  for (const auto& [origin, seq] : b) {
    if (SeqOf(a, origin) != seq) return false;
  }
  return true;
}

std::string VersionJson(const VersionMap& map) {
  base::Json json = base::Json::object();
  for (const auto& [origin, seq] : map) json[origin.ToString()] = seq;
  return json.dump();
}

}  // namespace reckon::server
