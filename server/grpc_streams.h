// The gossip transport's Exchange streams over gRPC's callback API: one
// reactor per stream, accepted or dialed; its write side (StreamCore); and
// the Link the node holds (GrpcLink). No thread per stream: every reaction
// only enqueues into the node (LinkEvents::On*). Writes are queued per
// stream, one in flight at a time, each frame kept alive until its
// OnWriteDone.
//
// Threads: gRPC's callback threads run the reactions (those of one stream
// never overlap); the node's threads call the Link (Send, Close, Abort,
// ResumeReading), under the stream's own lock.
#ifndef RECKON_SERVER_GRPC_STREAMS_H_
#define RECKON_SERVER_GRPC_STREAMS_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>

#include "proto/reckon.grpc.pb.h"
#include "server/link.h"

namespace reckon::server {

// Counts live reactors (streams and snapshot calls), so that the server's
// Shutdown can wait until none is left to call into the node.
class StreamCount {
 public:
  explicit StreamCount(std::shared_ptr<std::atomic<int>> n) : n_(std::move(n)) { ++*n_; }
  ~StreamCount() { --*n_; }

 private:
  std::shared_ptr<std::atomic<int>> n_;
};

using ExchangeReactor = grpc::ServerBidiReactor<v1::GossipFrame, v1::GossipFrame>;

// An accepted Exchange stream: its link goes to `events` (OnLinkUp at once,
// then every frame read, then OnLinkClosed). The reactor deletes itself
// when gRPC is done with it.
ExchangeReactor* AcceptExchange(LinkEvents* events, grpc::CallbackServerContext* context,
                                std::shared_ptr<std::atomic<int>> live);
// An Exchange call refused before any frame (UNAVAILABLE, `why`).
ExchangeReactor* RefuseExchange(const std::string& why);
// Dials an Exchange stream to `address` on `channel`; its events go to
// `events` (no OnLinkUp: the caller holds the link returned).
std::shared_ptr<Link> DialExchange(LinkEvents* events, const std::string& address,
                                   std::shared_ptr<grpc::Channel> channel,
                                   std::shared_ptr<std::atomic<int>> live);

}  // namespace reckon::server

#endif  // RECKON_SERVER_GRPC_STREAMS_H_
