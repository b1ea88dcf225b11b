#include "server/grpc_credentials.h"

#include <grpcpp/security/auth_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <vector>

namespace reckon::server {

namespace {

std::shared_ptr<grpc::experimental::CertificateProviderInterface> Provider(const TlsConfig& tls) {
  return std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
      tls.ca_pem,
      std::vector<grpc::experimental::IdentityKeyCertPair>{{tls.key_pem, tls.cert_pem}});
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::experimental::TlsServerCredentialsOptions options(Provider(tls));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(Provider(tls));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);  // the chain, against the CA
  // Peers are dialed by address (an IP, a Service name): the identity that
  // matters is the node id, checked against the certificate after the Hello.
  options.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  options.set_check_call_host(false);
  return grpc::experimental::TlsCredentials(options);
}

std::string PeerIdentity(const grpc::AuthContext& context) {
  if (!context.IsPeerAuthenticated()) return "";
  for (const grpc::string_ref& cn : context.FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
    return std::string(cn.data(), cn.size());
  }
  return "";
}

std::string PeerCertificate(const grpc::AuthContext& context) {
  if (!context.IsPeerAuthenticated()) return "";
  for (const grpc::string_ref& pem : context.FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME)) {
    return std::string(pem.data(), pem.size());
  }
  return "";
}

}  // namespace reckon::server
