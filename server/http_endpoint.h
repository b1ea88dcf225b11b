// A small HTTP/1.1 server for operators and probes (/metrics, /healthz,
// /readyz, /status), on Boost.Beast. One thread of its own: a slow or
// malicious client never touches the training or gossip threads.
//
// Contract: GET (and HEAD) of a registered path runs its handler on the
// endpoint's thread and answers; handlers must be quick and thread-safe.
// Anything else is answered with its status code and the connection closed:
// an unknown path 404, another method 405, a request with a body 413, a
// header over the limit 431, a malformed request 400; past max_connections
// at once, 503. A request not complete within the timeout is dropped.
// One request per connection (Connection: close).
#ifndef RECKON_SERVER_HTTP_ENDPOINT_H_
#define RECKON_SERVER_HTTP_ENDPOINT_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace reckon::server {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse()>;

struct HttpOptions {
  size_t max_connections = 8;
  size_t max_header_bytes = 8 << 10;
  std::chrono::milliseconds request_timeout{5000};
};

class HttpEndpoint {
 public:
  // Listens on `listen` ("host:port"; port 0 takes a free one) and serves
  // `routes` (path -> handler) until destroyed. kInvalidArgument for an
  // address that does not parse, kUnavailable when it cannot listen.
  static absl::StatusOr<std::unique_ptr<HttpEndpoint>> Start(const std::string& listen,
                                                             std::map<std::string, HttpHandler> routes,
                                                             HttpOptions options = {});
  virtual ~HttpEndpoint() = default;
  // The port it listens on (the one chosen, for port 0).
  virtual int port() const = 0;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_HTTP_ENDPOINT_H_
