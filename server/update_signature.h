// Signed updates (docs/protocol.md "Signed updates"): with mutual TLS on,
// every Update carries its origin's Ed25519 signature, made with the key of
// the origin's certificate, and every node verifies it before applying,
// whoever relayed the message. So no member, even one the CA admitted, can
// forge another's updates, and a relay cannot alter what it passes on.
//
// What is signed (SignedBytes): "reckon-update-v1", then the origin's node
// id (u32 length, bytes), incarnation (u64), seq (u64), codec (u32),
// param_count (u64), count (u32), rice_k (u32), step_quanta (i64), crc32c
// (u32), checksum_delta (u64), payload (u64 length, bytes); integers little-
// endian. Every field that changes what applying does is covered.
//
// The node uses them through update_signatures.h (MakeUpdateSignatures
// below), so that the gossip layer needs no OpenSSL.
//
// Thread-safety: UpdateSigner is immutable once made (OpenSSL's EVP_PKEY is
// safe to share for signing); CertificateBook is not thread-safe (its
// owner locks it); MakeUpdateSignatures' object is, every method.
#ifndef RECKON_SERVER_UPDATE_SIGNATURE_H_
#define RECKON_SERVER_UPDATE_SIGNATURE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/reckon.pb.h"
#include "server/tls.h"
#include "server/update_signatures.h"

namespace reckon::server {

std::string SignedBytes(const v1::Update& update);

class UpdateSigner {
 public:
  // `key_pem`: an Ed25519 private key (the certificate's).
  static absl::StatusOr<std::unique_ptr<UpdateSigner>> Create(const std::string& key_pem);
  ~UpdateSigner();
  // Sets update->signature (64 bytes).
  void Sign(v1::Update* update) const;

 private:
  struct Key;
  explicit UpdateSigner(std::unique_ptr<Key> key);
  std::unique_ptr<Key> key_;
};

// The certificates of the members this node knows, verified against the
// cluster CA, by node id (common name). A member may hold a few (re-issued
// certificates); the newest kMaxPerMember are kept.
class CertificateBook {
 public:
  static constexpr size_t kMaxPerMember = 4;
  static constexpr size_t kMaxMembers = 4096;
  explicit CertificateBook(std::string ca_pem);
  ~CertificateBook();
  CertificateBook(CertificateBook&&) noexcept;
  CertificateBook& operator=(CertificateBook&&) noexcept;

  // Verifies `pem` under the CA; returns its node id (common name). An error
  // names what is wrong; nothing is kept then. A certificate known already
  // is accepted again without work.
  absl::StatusOr<std::string> Add(const std::string& pem);
  bool Knows(const std::string& node_id) const;
  bool Has(const std::string& pem) const { return pem_to_node_.count(pem) > 0; }
  // Every certificate kept, PEM, for telling a new peer.
  std::vector<std::string> All() const;
  // OK when `update` carries a valid signature of its origin's key; else an
  // error saying which: kNotFound for an unknown signer, kUnauthenticated
  // for no signature or not its origin's.
  absl::Status Verify(const v1::Update& update) const;

 private:
  struct Entry;
  std::string ca_pem_;
  std::map<std::string, std::vector<std::shared_ptr<Entry>>> by_node_;
  std::map<std::string, std::string> pem_to_node_;  // dedup of Add
};

// The node's signatures (NodeOptions::signatures) for a member with `tls`
// (enabled): signs with tls.key_pem, verifies with the certificates learned
// under tls.ca_pem, this member's own (tls.cert_pem) the first. An error
// when the key or the certificate does not parse or verify.
absl::StatusOr<std::shared_ptr<UpdateSignatures>> MakeUpdateSignatures(const TlsConfig& tls);

}  // namespace reckon::server

#endif  // RECKON_SERVER_UPDATE_SIGNATURE_H_
