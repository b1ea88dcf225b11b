// A small HTTP/1.1 server for operators and probes (/metrics, /healthz,
// /readyz, /status), on Boost.Beast. One thread of its own: a slow or
// malicious client never touches the training or gossip threads.
//
// Contract: GET (and HEAD) of a registered path runs its handler on the
// endpoint's thread and answers; handlers must be quick and thread-safe.
// Anything else is answered with its status code and the connection closed:
// an unknown path 404, another method 405, a request with a body 413, a
// header over the limit 431, a malformed request 400. A request not complete
// within the timeout is dropped (counted: timed_out). One request per
// connection (Connection: close).
//
// At most max_connections are held at once. One more closes the oldest
// connection that has not sent its whole request yet (counted: evicted), so
// clients that open connections and never finish a request (by mistake or
// on purpose) cannot starve a liveness probe: a probe's request follows its
// connection at once and is answered in microseconds. Only when every held
// connection is being answered does a new one get 503 (counted: refused).
#ifndef RECKON_SERVER_HTTP_ENDPOINT_H_
#define RECKON_SERVER_HTTP_ENDPOINT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
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

// What the endpoint's limits turned away; read by the worker's /metrics.
struct HttpCounters {
  std::atomic<uint64_t> evicted{0};    // closed unfinished for a newer connection
  std::atomic<uint64_t> refused{0};    // answered 503: every held connection busy
  std::atomic<uint64_t> timed_out{0};  // no whole request within request_timeout
};

struct HttpOptions {
  size_t max_connections = 32;
  size_t max_header_bytes = 8 << 10;
  std::chrono::milliseconds request_timeout{5000};
  // Where the counters go (shared with whoever reports them); one of its
  // own when null.
  std::shared_ptr<HttpCounters> counters;
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
