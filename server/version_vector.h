// Origins and version vectors (docs/design.md "The gossip node"). An origin is
// one process life of one worker: (node_id, incarnation). A version vector
// maps each origin to the highest seq applied with no gap before it.
//
// Threads: values and pure functions, any thread. Errors: a vector from the
// wire with too many origins is refused before it is read, named
// (CheckOrigins).
#ifndef RECKON_SERVER_VERSION_VECTOR_H_
#define RECKON_SERVER_VERSION_VECTOR_H_

#include <compare>
#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "proto/reckon.pb.h"

namespace reckon::server {

struct OriginKey {
  std::string node_id;
  uint64_t incarnation = 0;
  auto operator<=>(const OriginKey&) const = default;
  std::string ToString() const;  // "w1#1732312345000000000"
};

using VersionMap = std::map<OriginKey, uint64_t>;

OriginKey KeyOf(const v1::Origin& origin);
void ToProto(const VersionMap& map, v1::VersionVector* out);
VersionMap FromProto(const v1::VersionVector& vv);
// A vector from the network names at most `max_origins` origins
// (NodeService::max_vector_origins: every node's own holds no more):
// checked before FromProto builds a map of it. The error says how many it
// names.
absl::Status CheckOrigins(const v1::VersionVector& vv, size_t max_origins);
// Entry for `origin`, 0 when absent.
uint64_t SeqOf(const VersionMap& map, const OriginKey& origin);

// SeqOf for origins asked in increasing order (a walk of another vector):
// one step along `map` per origin instead of a search from its root, for
// the loops that visit every origin (anti-entropy, per member and tick).
// Entries added to `map` during the walk are not seen; none may be erased.
class SeqCursor {
 public:
  explicit SeqCursor(const VersionMap& map) : at_(map.begin()), end_(map.end()) {}
  uint64_t At(const OriginKey& origin) {
    while (at_ != end_ && at_->first < origin) ++at_;
    return at_ != end_ && at_->first == origin ? at_->second : 0;
  }

 private:
  VersionMap::const_iterator at_, end_;
};
// Equal when every origin has the same seq (absent counts as 0).
bool SameVersions(const VersionMap& a, const VersionMap& b);
// The map as a JSON object, {"w0#17...":12,...}, for logs and errors.
std::string VersionJson(const VersionMap& map);

}  // namespace reckon::server

#endif  // RECKON_SERVER_VERSION_VECTOR_H_
