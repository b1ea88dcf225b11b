// What holding something costs the process, for the caps on what peers can
// make a node hold (docs/protocol.md section 8): the bytes the allocator
// hands out, not the wire's. A small Update's frame and decoded form cost
// about four times its wire size in allocations (a shared frame, the Update
// and Origin messages, string objects, the decoded vectors, the holder's map
// nodes, each with the allocator's header and rounding); caps that counted
// wire bytes held about four times their memory.
//
// The model is glibc's malloc (a chunk is the request plus an 8-byte header,
// rounded up to 16, at least 32; requests of 128 KiB and more are mmapped
// whole pages) and libstdc++'s containers (a string keeps up to 15
// characters inside itself; a red-black tree node is 32 bytes of links and
// colour before its value; make_shared puts a 16-byte control block beside
// the object). tests/server/held_bytes_test.cc checks it against mallinfo2.
//
// Threads: pure functions.
#ifndef RECKON_SERVER_HELD_BYTES_H_
#define RECKON_SERVER_HELD_BYTES_H_

#include <cstddef>
#include <string>

#include "codec/update_message.h"
#include "proto/reckon.pb.h"

namespace reckon::server {

// The allocator's chunk for a request of `requested` bytes (0: none).
size_t HeapBytes(size_t requested);
// What a string owns beyond itself: its buffer, unless it is kept inside.
size_t HeapBytesOf(const std::string& s);
// A std::map / std::set node whose value is `value_bytes` big.
inline size_t TreeNodeBytes(size_t value_bytes) { return HeapBytes(32 + value_bytes); }
// A frame held by a shared_ptr from make_shared, and everything it owns
// (sub-messages, strings, repeated fields, unknown fields).
size_t HeldBytesOf(const v1::GossipFrame& frame);
// A decoded Update held by a shared_ptr from make_shared, and its vectors.
size_t HeldBytesOf(const codec::DecodedUpdate& decoded);

}  // namespace reckon::server

#endif  // RECKON_SERVER_HELD_BYTES_H_
