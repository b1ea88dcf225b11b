// What an Update must pass before any of it is kept (docs/wire.md §3.2) that
// needs nothing of a node's state: its payload decodes (CRC, codec rules,
// indices) for this cluster's model, and its checksum_delta is what its words
// add to the replica (header fields the CRC does not cover, step_quanta
// among them, or an encoder and decoder that disagree, would otherwise make
// replicas differ silently). The node's rules that do need its state (the
// origin's next seq, duplicates, the origin cap) stay with it; it verifies
// the signature beside this, off its lock too (ValidatedUpdate::signature).
//
// Threads: pure; the node's receive path calls it off the node's lock, on
// the validation threads (NodeOptions::receive_threads), and under the lock
// for an Update that did not come in a batch (a snapshot's installer
// replaying early arrivals).
#ifndef RECKON_SERVER_UPDATE_VALIDATION_H_
#define RECKON_SERVER_UPDATE_VALIDATION_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "codec/update_message.h"
#include "codec/weight_checksum.h"
#include "proto/reckon.pb.h"

namespace reckon::server {

struct ValidatedUpdate {
  absl::Status status;  // kDataLoss (or the decoder's code) naming what is wrong
  std::shared_ptr<const codec::DecodedUpdate> decoded;  // when status is OK
  // The node's UpdateSignatures::Verify, made beside it off the lock (with
  // TLS only).
  std::optional<absl::Status> signature;
};

ValidatedUpdate ValidateUpdate(const v1::Update& update, uint64_t param_count,
                               const codec::WeightChecksum& checksum);

}  // namespace reckon::server

#endif  // RECKON_SERVER_UPDATE_VALIDATION_H_
