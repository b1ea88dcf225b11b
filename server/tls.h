// Mutual TLS between peers (docs/gossip.md "Security"): every member holds a
// certificate signed by the cluster's CA whose common name is its node id,
// and an Ed25519 key. The handshake verifies the chain both ways; the node
// then requires the node id a peer claims in its Hello to be the identity
// of its certificate, so no member can speak for another.
//
// Certificates are made with OpenSSL (`reckonctl certs`, or these functions
// in tests). Ed25519 throughout: the same key signs Updates. The gRPC
// credentials made of a TlsConfig are grpc_credentials.h's (the transport).
//
// Threads: plain functions, any thread.
#ifndef RECKON_SERVER_TLS_H_
#define RECKON_SERVER_TLS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace reckon::server {

// PEM texts. Empty: TLS off (insecure channels, --cluster-token only).
struct TlsConfig {
  std::string ca_pem;    // the cluster CA's certificate
  std::string cert_pem;  // this member's certificate, signed by the CA
  std::string key_pem;   // its private key
  std::string identity;  // the certificate's common name (LoadTls fills it)
  bool enabled() const { return !ca_pem.empty(); }
};

// Reads the three files and checks them before anything listens: each parses,
// the certificate is signed by the CA and valid now, the key is the
// certificate's. Errors name the file and what is wrong.
absl::StatusOr<TlsConfig> LoadTls(const std::string& ca_path, const std::string& cert_path,
                                  const std::string& key_path);
// The same checks on PEM texts already in memory (`what` names them).
absl::StatusOr<TlsConfig> CheckTls(TlsConfig config, const std::string& what);

// `cert_pem` verified under `ca_pem` (chain, validity now): its common name.
absl::StatusOr<std::string> VerifyCertificate(const std::string& ca_pem,
                                              const std::string& cert_pem);

// --- making certificates (reckonctl certs, tests) ---
struct KeyAndCertificate {
  std::string key_pem;
  std::string cert_pem;
};
// A self-signed CA named `name`, valid for `days`.
absl::StatusOr<KeyAndCertificate> MakeCertificateAuthority(const std::string& name, int days);
// A member certificate for `common_name` (a node id, or an operator's name
// for reckonctl), signed by `ca`, usable as TLS server and client; its
// subject alternative names are the common name and `hosts` (DNS names or
// IP addresses).
absl::StatusOr<KeyAndCertificate> IssueCertificate(const KeyAndCertificate& ca,
                                                   const std::string& common_name,
                                                   const std::vector<std::string>& hosts,
                                                   int days);

}  // namespace reckon::server

#endif  // RECKON_SERVER_TLS_H_
