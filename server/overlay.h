// The tree overlay (docs/protocol.md "The tree overlay"): how a fresh
// message travels when the cluster fingerprint's overlay is
// GOSSIP_OVERLAY_TREE. Pure functions of the ring, tested on their own
// (tests/server/).
//
// The ring is every member alive in a node's failure detector, itself
// included, sorted by node id; positions are counted from the origin's.
// The origin sends to the members 1, 2, 4, 8, ... after it; a member at
// position r > 0 forwards to r + 2^i for every 2^i below r's lowest set
// bit: a binomial tree. Every member gets each message once (N - 1 copies,
// as the mesh sends), over at most ceil(log2 N) hops, and no node sends one
// message more than ceil(log2 N) times: the origin's burst of N - 1 copies
// is spread over the tree. Every edge joins members 2^i apart on the ring,
// so a node's tree neighbours are at most 2 ceil(log2 N) of them, whatever
// the origin.
//
// Members whose views of the ring differ (one has not heard of a joiner
// yet) may miss a message or get it twice: anti-entropy fills the gap and
// the version vector drops the duplicate, so apply stays exactly-once.
//
// Threads: pure functions, any thread. Errors: none.
#ifndef RECKON_SERVER_OVERLAY_H_
#define RECKON_SERVER_OVERLAY_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace reckon::server {

class Ring {
 public:
  // `node_ids`: every member heard, this node included; any order, no
  // duplicates.
  explicit Ring(std::vector<std::string> node_ids);
  Ring() = default;

  size_t size() const { return ids_.size(); }
  std::optional<size_t> Position(const std::string& node_id) const;

  // The node ids `self` forwards `origin`'s messages to; empty when either is
  // not on the ring.
  std::vector<std::string> Children(const std::string& origin, const std::string& self) const;
  // Whether `member` gets `origin`'s messages from `self` in the tree.
  bool IsChild(const std::string& origin, const std::string& self, const std::string& member) const;
  // Whether a and b are 2^i apart one way round the ring or the other: an
  // edge of some origin's tree.
  bool Neighbours(const std::string& a, const std::string& b) const;

 private:
  std::vector<std::string> ids_;  // sorted
};

// Positions relative to the origin (0): the ones `relative` sends to, in a
// ring of `size`.
std::vector<size_t> TreeChildren(size_t relative, size_t size);
// The one `relative` (> 0) gets its messages from.
size_t TreeParent(size_t relative);

}  // namespace reckon::server

#endif  // RECKON_SERVER_OVERLAY_H_
