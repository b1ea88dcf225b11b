#include "server/http_endpoint.h"

#include <atomic>
#include <list>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace reckon::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

class Session;

// Everything below runs on the endpoint's one thread (the io_context has one,
// and every handler runs in it), so nothing here needs a lock; the counters
// are atomics because scrapes read them from the same thread and tests from
// theirs.
struct Shared {
  std::map<std::string, HttpHandler> routes;
  HttpOptions options;
  std::shared_ptr<HttpCounters> counters;
  size_t held = 0;  // connections open and not evicted
  // Connections still reading their request, oldest first: the ones a new
  // connection may evict when `held` reaches max_connections.
  std::list<std::weak_ptr<Session>> reading;
};

// One connection: read one request (bounded in size and time), answer, close.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<Shared> shared)
      : stream_(std::move(socket)), shared_(std::move(shared)) {
    ++shared_->held;
  }
  ~Session() { Release(); }

  // At capacity, a new connection closes the oldest one that has not sent
  // its whole request: a client that holds connections open without
  // finishing a request cannot starve a probe (a request answered is quick
  // and is never cut). Only when every held connection is being answered
  // does the new one get 503.
  void Start() {
    if (shared_->held > shared_->options.max_connections && !EvictOldestReader()) {
      ++shared_->counters->refused;
      Respond({503, "text/plain; charset=utf-8", "too many connections\n"}, false);
      return;
    }
    parser_.header_limit(static_cast<std::uint32_t>(shared_->options.max_header_bytes));
    parser_.body_limit(0);
    stream_.expires_after(shared_->options.request_timeout);
    reading_ = shared_->reading.insert(shared_->reading.end(), weak_from_this());
    is_reading_ = true;
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

 private:
  bool EvictOldestReader() {
    while (!shared_->reading.empty()) {
      std::shared_ptr<Session> oldest = shared_->reading.front().lock();
      if (oldest == nullptr) {
        shared_->reading.pop_front();
        continue;
      }
      oldest->StopReading();
      oldest->Release();
      beast::error_code ignored;
      oldest->stream_.socket().close(ignored);  // its read ends: operation_aborted
      ++shared_->counters->evicted;
      return true;
    }
    return false;
  }
  void StopReading() {
    if (!is_reading_) return;
    shared_->reading.erase(reading_);
    is_reading_ = false;
  }
  // This connection no longer counts against max_connections.
  void Release() {
    StopReading();
    if (released_) return;
    released_ = true;
    --shared_->held;
  }

  void OnRead(beast::error_code ec) {
    StopReading();
    if (ec == asio::error::operation_aborted) return;  // evicted
    if (ec == beast::error::timeout) {
      ++shared_->counters->timed_out;
      return;  // dropped
    }
    if (ec == http::error::end_of_stream) return;  // dropped
    if (ec == http::error::header_limit) {
      Respond({431, "text/plain; charset=utf-8", "request header too large\n"}, false);
      return;
    }
    if (ec == http::error::body_limit || ec == http::error::unexpected_body) {
      Respond({413, "text/plain; charset=utf-8", "requests here have no body\n"}, false);
      return;
    }
    if (ec) {
      Respond({400, "text/plain; charset=utf-8", absl::StrCat("bad request: ", ec.message(), "\n")},
              false);
      return;
    }
    const auto& request = parser_.get();
    const bool head = request.method() == http::verb::head;
    if (request.method() != http::verb::get && !head) {
      Respond({405, "text/plain; charset=utf-8", "only GET and HEAD\n"}, false);
      return;
    }
    std::string path(request.target());
    path = path.substr(0, path.find('?'));
    const auto route = shared_->routes.find(path);
    if (route == shared_->routes.end()) {
      Respond({404, "text/plain; charset=utf-8", absl::StrCat("no such path: ", path.substr(0, 200),
                                                              "\n")},
              head);
      return;
    }
    Respond(route->second(), head);
  }

  void Respond(HttpResponse r, bool head) {
    auto response = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), 11);
    response->set(http::field::server, "reckon");
    response->set(http::field::content_type, r.content_type);
    if (r.status == 405) response->set(http::field::allow, "GET, HEAD");
    response->keep_alive(false);
    response->content_length(r.body.size());
    if (!head) response->body() = std::move(r.body);
    stream_.expires_after(shared_->options.request_timeout);
    http::async_write(stream_, *response,
                      [self = shared_from_this(), response](beast::error_code, size_t) {
                        beast::error_code ignored;
                        self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                      });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request_parser<http::empty_body> parser_;
  std::shared_ptr<Shared> shared_;
  std::list<std::weak_ptr<Session>>::iterator reading_;  // valid while is_reading_
  bool is_reading_ = false;
  bool released_ = false;
};

class BeastEndpoint final : public HttpEndpoint {
 public:
  BeastEndpoint(std::shared_ptr<Shared> shared) : shared_(std::move(shared)), acceptor_(io_) {}
  ~BeastEndpoint() override {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

  absl::Status Listen(const std::string& host, int port) {
    beast::error_code ec;
    const asio::ip::address address = asio::ip::make_address(host.empty() ? "0.0.0.0" : host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("--http-listen: '", host, "' is not an IP address"));
    }
    const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("--http-listen: cannot listen on ", host, ":", port, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    Accept();
    thread_ = std::thread([this] { io_.run(); });
    return absl::OkStatus();
  }

  int port() const override { return port_; }

 private:
  void Accept() {
    acceptor_.async_accept(asio::make_strand(io_), [this](beast::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) std::make_shared<Session>(std::move(s), shared_)->Start();
      Accept();
    });
  }

  std::shared_ptr<Shared> shared_;
  asio::io_context io_{1};
  tcp::acceptor acceptor_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& listen, std::map<std::string, HttpHandler> routes, HttpOptions options) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-listen '", listen, "' is not host:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto shared = std::make_shared<Shared>();
  shared->routes = std::move(routes);
  shared->options = options;
  shared->counters =
      options.counters != nullptr ? options.counters : std::make_shared<HttpCounters>();
  auto endpoint = std::make_unique<BeastEndpoint>(std::move(shared));
  if (absl::Status s = endpoint->Listen(host, port); !s.ok()) return s;
  return std::unique_ptr<HttpEndpoint>(std::move(endpoint));
}

}  // namespace reckon::server
