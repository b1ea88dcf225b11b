// Signed updates as the gossip node sees them (docs/protocol.md "Signed
// updates"): it signs its own, verifies everyone's before keeping anything
// of them, and learns the members' certificates from their frames. What a
// signature is and how certificates are checked is the security layer's
// (update_signature.h MakeUpdateSignatures, OpenSSL inside); the node knows
// only this interface, given in NodeOptions::signatures (null: updates are
// neither signed nor verified).
//
// Threads: every method may be called from any thread, concurrently: the
// node verifies on its validation threads, off its lock, while its thread
// learns certificates and the training thread signs.
#ifndef RECKON_SERVER_UPDATE_SIGNATURES_H_
#define RECKON_SERVER_UPDATE_SIGNATURES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/reckon.pb.h"

namespace reckon::server {

class UpdateSignatures {
 public:
  virtual ~UpdateSignatures() = default;

  // Sets update->signature with this member's key.
  virtual void Sign(v1::Update* update) const = 0;
  // OK when `update` carries a valid signature of its origin's key.
  // kNotFound: no certificate of its origin is known (yet: one may come in
  // a later frame); kUnauthenticated: it is not signed, or not by its
  // origin. The message says which.
  virtual absl::Status Verify(const v1::Update& update) const = 0;

  struct Learned {
    std::string node_id;   // the certificate's common name
    bool new_one = false;  // not known before this call
  };
  // Checks `pem` (a member's certificate) under the cluster's CA and keeps
  // it; an error names what is wrong, and nothing is kept then.
  virtual absl::StatusOr<Learned> Learn(const std::string& pem) = 0;
  // Every certificate kept (PEM), this member's own among them: what a new
  // peer is told.
  virtual std::vector<std::string> Certificates() const = 0;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_UPDATE_SIGNATURES_H_
