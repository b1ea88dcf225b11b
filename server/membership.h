// Membership's decisions (docs/protocol.md sections 3 and 4), as pure
// functions of what the node knows, so each rule is tested on its own
// (tests/server/): whom a Hello admits, what a heartbeat's member list
// teaches, which of two streams between a pair survives, and when the
// failure detector declares a member dead.
// The node applies them under its lock.
//
// Threads: pure functions, any thread. Errors: a refused Hello is a verdict
// naming why (the node sends it as the Refusal's reason).
#ifndef RECKON_SERVER_MEMBERSHIP_H_
#define RECKON_SERVER_MEMBERSHIP_H_

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/reckon.pb.h"
#include "server/member.h"
#include "server/version_vector.h"

namespace reckon::server {

struct HelloVerdict {
  enum Kind {
    kAdmit,     // a member (new, known, or a newer incarnation of a known one)
    kRefuse,    // answer Refusal{reason, permanent} and end the stream
    kSelfDial,  // we dialed our own address: remember it, close quietly
  } kind = kAdmit;
  std::string reason;
  bool permanent = false;
  // The NodeCounters field a refusal adds one to. peers_refused: what no
  // member of this cluster is sent (another cluster, the token, an
  // identity, a malformed Hello), so the ReckonRefusals alert fires on it;
  // peers_refused_for_now: what a healthy cluster meets and outlives (a
  // restart racing its old incarnation, a second stream, a leaver's late
  // dial); members_refused: past the member cap.
  int counter = v1::NodeCounters::kPeersRefusedFieldNumber;
};

// MemberTable::Judge fills in self, members and max_members from the table.
struct HelloContext {
  OriginKey self;
  // CheckPeer's verdict on the Hello's fingerprint and token.
  absl::Status fingerprint_and_token;
  // With mutual TLS: the identity of the certificate the stream presented.
  bool require_identity = false;
  std::string peer_identity;
  const MemberMap* members = nullptr;
  size_t max_members = 1024;
  // Whether this node dialed the stream the Hello came on.
  bool link_dialed = false;
  // A member heard within this long before `now`, on a stream that is up,
  // is alive: another incarnation of it is not a restart yet, and another
  // stream of it is not a reconnection (only a dial race's, while the
  // first is new).
  Clock::time_point now;
  Clock::duration failure_timeout = std::chrono::seconds(3);
  // The table holds a name nobody heard and we never reached
  // (MemberTable::OnlyAName): a new member takes its place when full.
  bool a_name_can_give_way = false;
};

// The checks of docs/protocol.md section 3, in its order; the first that
// fails decides.
HelloVerdict JudgeHello(const v1::Hello& hello, const HelloContext& context);

// Whether `given` is the cluster's `token`, in time that does not depend on
// where they differ or on their lengths (both are hashed first): a prober
// cannot learn the token a byte at a time from how long refusals take.
bool TokenMatches(const std::string& given, const std::string& token);

// Two fingerprints' model strings that differ, said so that the reader
// finds the difference: where both are a framework's layout ("name:shape"
// entries joined by ';', python/reckon/torch.py), the first tensor that
// differs, by position and name, or the first one only one side has;
// nullopt for other model strings (reckon-worker's "784,512,512,10/relu":
// both are said whole). `theirs` comes from the network: at most 64
// characters of a part of it are quoted.
std::optional<std::string> DescribeModelDifference(const std::string& theirs,
                                                   const std::string& ours);

// What the member list of a heartbeat from `from` (a member this node,
// `self_id`, reached) teaches, applied to `members`: `from.hears` becomes
// the entries it hears; an id never seen becomes a member (connecting,
// known since `now`), unless `max_members` are known already (refused,
// counted); a member never reached takes the address a member that hears
// it gives (one address per member: many addresses for one id leave the
// last); whoever `from` hears is vouched (it counts in the ending's
// majority). Entries with an invalid id, our own, or an address empty or
// over 255 bytes are skipped. A list that is empty (a heartbeat between two
// that carry one) teaches nothing.
struct LearnedAddress {
  Member* member;
  std::string address;  // where the caller dials it now
  bool new_member;
};
struct ListLearned {
  std::vector<LearnedAddress> addresses;
  uint64_t refused = 0;  // new ids past max_members
};
// `forgotten`: names this node forgot (MemberTable::OnlyAName, dead): not
// learned again from a list that does not say it hears them, or two nodes
// would teach each other the same made-up names for ever.
ListLearned LearnMemberList(Member& from,
                            const google::protobuf::RepeatedPtrField<v1::Member>& list,
                            const std::string& self_id, size_t max_members, Clock::time_point now,
                            MemberMap* members, const std::set<std::string>* forgotten = nullptr);

// Two streams for one pair (both dialed at once): both ends keep the one
// dialed by the smaller node id, so they agree without a message. True when
// the node `self_id` keeps the stream it `dialed` (true) or accepted.
bool KeepsStream(const std::string& self_id, const std::string& peer_id, bool dialed);

// The failure detector: when `m` has been silent past the timeout (alive:
// since it was last heard; connecting: since it was first known), the line
// that says it is now dead; nullopt otherwise.
std::optional<std::string> SilentTooLong(const Member& m, Clock::time_point now,
                                         Clock::duration failure_timeout);

}  // namespace reckon::server

#endif  // RECKON_SERVER_MEMBERSHIP_H_
