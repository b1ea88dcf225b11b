// A bare HTTP/1.1 client over a loopback socket, for tests of the HTTP
// endpoint: it sends exactly the bytes given (junk included) and reads the
// answer until the server closes.
#ifndef RECKON_TESTS_HTTP_CLIENT_H_
#define RECKON_TESTS_HTTP_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <string>

namespace reckon::testing {

// A connected socket to 127.0.0.1:port, or -1.
inline int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends until it closes or `timeout` passes.
inline std::string ReadAll(int fd, std::chrono::milliseconds timeout) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Sends `request` as is and returns the whole answer ("" when none).
inline std::string Exchange(int port, const std::string& request,
                            std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string answer = ReadAll(fd, timeout);
  ::close(fd);
  return answer;
}

struct HttpResult {
  int status = 0;  // 0: no answer
  std::string body;
};

// The status and body of an answer (a chunked body joined).
inline HttpResult ParseAnswer(const std::string& answer) {
  HttpResult r;
  if (answer.rfind("HTTP/1.1 ", 0) != 0) return r;
  r.status = std::atoi(answer.c_str() + 9);
  const size_t end = answer.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  std::string headers = answer.substr(0, end);
  for (char& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string body = answer.substr(end + 4);
  if (headers.find("transfer-encoding: chunked") == std::string::npos) {
    r.body = body;
    return r;
  }
  size_t at = 0;
  for (;;) {
    const size_t line = body.find("\r\n", at);
    if (line == std::string::npos) break;
    const size_t size = std::strtoul(body.substr(at, line - at).c_str(), nullptr, 16);
    if (size == 0) break;
    r.body += body.substr(line + 2, size);
    at = line + 2 + size + 2;
  }
  return r;
}

inline HttpResult HttpGet(int port, const std::string& path) {
  return ParseAnswer(Exchange(
      port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"));
}

// `text` percent-encoded for a query string.
inline std::string UrlEncode(const std::string& text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace reckon::testing

#endif  // RECKON_TESTS_HTTP_CLIENT_H_
