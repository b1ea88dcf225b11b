// The gRPC credentials of the gossip transport, made of a TlsConfig
// (tls.h): mutual TLS between peers, or insecure channels without it.
//
// Threads: plain functions, any thread.
#ifndef RECKON_SERVER_GRPC_CREDENTIALS_H_
#define RECKON_SERVER_GRPC_CREDENTIALS_H_

#include <memory>
#include <string>

#include "server/tls.h"

namespace grpc {
class AuthContext;
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace reckon::server {

// Credentials for the gossip service and for dialing it. With TLS: the peer
// must present a certificate of the CA (both ways); host names are not
// checked (peers are dialed by address; the identity check is the node
// id's, after the handshake). Without: insecure.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const TlsConfig& tls);
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const TlsConfig& tls);

// The common name of the peer's verified certificate; empty without TLS.
std::string PeerIdentity(const grpc::AuthContext& context);
// The peer's certificate, PEM; empty without TLS.
std::string PeerCertificate(const grpc::AuthContext& context);

}  // namespace reckon::server

#endif  // RECKON_SERVER_GRPC_CREDENTIALS_H_
