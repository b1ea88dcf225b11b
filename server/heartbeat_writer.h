// What this node's heartbeats say, and which members a tick's go to
// (docs/protocol.md "Failure detection" and section 4): the tick count, our
// vector as the last tick's heartbeats announced it (so that a member whose
// stream had that heartbeat is sent only what changed since), the member
// list on every member_list_every-th heartbeat of a stream, and the origins
// of its we refuse. What a heartbeat reports of training, settlement and
// checks is the node's (it hands them in); sending is the node's too.
//
// Threads: GossipNode holds one under its lock (NodeCore::mu) and calls it only so;
// not thread-safe on its own.
#ifndef RECKON_SERVER_HEARTBEAT_WRITER_H_
#define RECKON_SERVER_HEARTBEAT_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "proto/reckon.pb.h"
#include "server/member.h"
#include "server/member_table.h"
#include "server/overlay.h"
#include "server/version_vector.h"

namespace reckon::server {

class HeartbeatWriter {
 public:
  struct Options {
    OriginKey self;
    std::string listen_address;  // ours, first in every member list
    int member_list_every = 1;   // NodeOptions::member_list_every (at least 1)
    Clock::duration failure_timeout;     // NodeOptions::failure_timeout
    Clock::duration heartbeat_interval;  // NodeOptions::heartbeat_interval (> 0)
  };
  explicit HeartbeatWriter(Options options);

  // A tick begins (the node's timer).
  void NextTick() { ++ticks_; }
  uint64_t ticks() const { return ticks_; }

  // Whether `m` is sent this tick's heartbeat: in the mesh, and to our tree
  // neighbours, every tick; to the other members of a tree only every few
  // ticks (still four or more within a failure timeout): O(N log N)
  // heartbeats a tick, not O(N^2).
  bool Due(const Member& m, bool tree, const Ring& ring) const;

  // A heartbeat's frames before any member's part: `whole` carries our
  // vector, `changes` (applied_changes_only) what changed in it since the
  // previous tick's heartbeats; null when it went back (a snapshot
  // installed) or outside a tick, and every member is sent `whole`.
  struct Bases {
    std::shared_ptr<const v1::GossipFrame> whole, changes;
  };
  // `said`: what every heartbeat says besides the vector (steps, training
  // done, settled and the hash, a check to announce); `applied`: our
  // vector. `tick`: the heartbeats of a tick (the changes are taken against
  // the last tick's, which then becomes `applied`); else one outside the
  // timer (a handshake's, our last word before a Leave).
  Bases Make(const v1::Heartbeat& said, const VersionMap& applied, bool tick);

  // `m`'s heartbeat: the changes when its stream had the previous tick's
  // heartbeat (and this one carries no member list), else the whole
  // vector; with the stream's own count of frames received from `m`, the
  // member list (us first, then `table`'s members that did not leave) on
  // every member_list_every-th heartbeat of the stream (the O(members)
  // list is built only then), and the origins it applied that we refuse:
  // those found since the last, all of them with the member list.
  std::shared_ptr<const v1::GossipFrame> For(Member& m, const Bases& bases,
                                             const MemberTable& table) const;
  // `m`'s stream took this tick's heartbeat (its next may be the changes).
  void Sent(Member& m) const { m.links.state().heartbeat_tick = ticks_; }

 private:
  void AddMemberList(v1::Heartbeat* hb, const MemberTable& table) const;

  const Options options_;
  // A tree's non-neighbours get every far_every_-th tick's heartbeat (Due).
  const uint64_t far_every_;
  uint64_t ticks_ = 0;
  // Our vector as the last tick's heartbeats said it (Make).
  VersionMap announced_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_HEARTBEAT_WRITER_H_
