// A stream to one peer as the gossip node sees it. Implementations: the gRPC
// bidirectional stream (grpc_transport.h), links within one process
// (inproc_link.h), and a fault-injecting wrapper around either
// (fault_link.h) that the failure tests use.
//
// Threading: Send, Close and Abort may be called from any thread and never
// block. A transport reports each link's events (open, frames, close) to a
// LinkEvents, naming the link; the node is one, and only enqueues.
#ifndef RECKON_SERVER_LINK_H_
#define RECKON_SERVER_LINK_H_

#include <cstddef>
#include <memory>
#include <string>
#include <functional>

#include "proto/reckon.pb.h"

namespace reckon::server {

class Link {
 public:
  virtual ~Link() = default;
  // Queues `frame` behind earlier ones; the link keeps the pointer until
  // the frame is written. Returns false (frame not queued) when the link is
  // closed or its queue already holds `byte_cap` bytes or more (of memory,
  // as allocated: server/held_bytes.h; a link without a queue may count
  // wire bytes).
  virtual bool Send(std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap) = 0;
  // Queues `frame` ahead of the frames waiting (behind the write in flight
  // and earlier urgent frames): heartbeats, so that a peer behind a slow
  // link still hears from us every heartbeat interval and not only once
  // megabytes of updates have drained (with dense messages on 100 Mbit/s
  // links, 16 MiB queued per peer took 4 s, and peers were taken for dead).
  // A link without a queue sends it like any frame.
  virtual bool SendUrgent(std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap) {
    return Send(std::move(frame), byte_cap);
  }
  // Bytes queued and not yet handed to the transport (as Send counts them).
  virtual size_t QueuedBytes() const = 0;
  // Ends the stream after the frames already queued; idempotent. The node's
  // OnLinkClosed follows (once) when the stream is gone.
  virtual void Close() = 0;
  // Ends the stream now, dropping what is queued, even with a write in
  // flight: for a peer that stopped reading (dead, stopped, partitioned) or
  // a dial that never completed, where Close would wait on that write
  // forever. OnLinkClosed follows once.
  virtual void Abort() = 0;
  // True when this side dialed (the node keeps the stream dialed by the
  // smaller node id when a pair has two).
  virtual bool dialed() const = 0;
  // For logs: "dialed 127.0.0.1:7001" / "accepted from ipv4:127.0.0.1:51234".
  virtual std::string Describe() const = 0;
  // The identity of the peer's verified TLS certificate (its common name),
  // known once its first frame arrived; empty without TLS.
  virtual std::string PeerIdentity() const { return ""; }
  // That certificate, PEM (to verify the peer's signed Updates).
  virtual std::string PeerCertificate() const { return ""; }
  // Reads on after LinkEvents::OnFrame said to pause (flow control: the
  // peer's frames wait in its HTTP/2 window and the sockets meanwhile). A
  // resume that overtakes the pause cancels it. No-op for a link that does
  // not pause, or once it is gone.
  virtual void ResumeReading() {}
};

// Dials a peer: returns a link whose events reach the LinkEvents the dialer
// was made for (OnFrame as frames come, OnLinkClosed when it ends or fails).
using Dialer = std::function<std::shared_ptr<Link>(const std::string& address)>;

// Where a transport reports its links' events. Every call may come from any
// thread, possibly inline inside a Link call made under the caller's lock:
// implementations must only enqueue (take no lock but a leaf one).
class LinkEvents {
 public:
  virtual ~LinkEvents() = default;
  // An accepted stream is open (dialed ones are the dialer's return value).
  virtual void OnLinkUp(const std::shared_ptr<Link>& link) = 0;
  // Returns whether the transport may read the link's next frame now;
  // false: pause until Link::ResumeReading (transports that cannot pause
  // read on, and the receiver bears it).
  virtual bool OnFrame(const std::shared_ptr<Link>& link, v1::GossipFrame frame) = 0;
  // Once per link, when it is gone.
  virtual void OnLinkClosed(const std::shared_ptr<Link>& link, const std::string& why) = 0;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_LINK_H_
