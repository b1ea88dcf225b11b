// An Update frame for the node's parts' tests: only origin, seq and a
// payload of a given size (no codec: the parts under test never decode it).
#ifndef RECKON_TESTS_UPDATE_FRAME_H_
#define RECKON_TESTS_UPDATE_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "proto/reckon.pb.h"
#include "server/version_vector.h"

namespace reckon::server {

inline std::shared_ptr<const v1::GossipFrame> UpdateFrame(const OriginKey& origin, uint64_t seq,
                                                          size_t payload_bytes = 10) {
  auto f = std::make_shared<v1::GossipFrame>();
  f->mutable_update()->mutable_origin()->set_node_id(origin.node_id);
  f->mutable_update()->mutable_origin()->set_incarnation(origin.incarnation);
  f->mutable_update()->set_seq(seq);
  f->mutable_update()->set_payload(std::string(payload_bytes, 'x'));
  return f;
}

}  // namespace reckon::server

#endif  // RECKON_TESTS_UPDATE_FRAME_H_
