// reckon-attacker: a member of a token cluster turned hostile (no TLS: it
// holds the token, as any member does), playing docs/gossip.md's threat
// model against running workers. tests/attack/attack.py drives it against a
// training cluster and checks what the threat model promises: no worker
// stops or hangs, memory stays under the caps, the honest workers end
// identical.
//
//   reckon-attacker --targets 127.0.0.1:7070,127.0.0.1:7071 --token T
//       --scenario random --seconds 20 --seed 1
//   reckon-attacker --targets 127.0.0.1:7070 --token T --scenario origins --origins 200000
//
// Scenarios:
//   random   threads of randomized, valid-looking frame sequences on streams
//            it opens and drops: Hellos with odd incarnations, other members'
//            ids, bad ids, wrong tokens or fingerprints, lanes; Updates of
//            invented origins (next in line, early, at seq 2^40, duplicated,
//            corrupted, with unknown fields; with --actions equivocation,
//            another message under an id already sent); heartbeats with made-up vectors,
//            member lists and checks; Leaves, Refusals, RejoinRequired,
//            Certificates; Status and Snapshot calls. Its listen address
//            answers every dial with a permanent Refusal. Its threads
//            invent `--invented` origins in all: past the workers'
//            --max-origins each worker takes a different set, and the
//            ending fails with "replicas diverged" (docs/gossip.md).
//   origins  one stream, `--origins` invented origins at seq 2 (never
//            applicable), one small valid Update each.
//
// It prints one JSON object (frames sent by kind, streams opened and closed by
// the target, calls refused) on stdout, and exits 0 unless it could not start.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "codec/update_message.h"
#include "codec/weight_checksum.h"
#include "proto/reckon.grpc.pb.h"
#include "server/grpc_clients.h"
#include "server/grpc_transport.h"
#include "server/tls.h"

ABSL_FLAG(std::string, targets, "", "comma-separated host:port of the workers to attack");
ABSL_FLAG(std::string, token, "", "the cluster token (a member has it)");
ABSL_FLAG(std::string, scenario, "random", "random | origins");
ABSL_FLAG(double, seconds, 10, "how long the random scenario runs");
ABSL_FLAG(int64_t, origins, 200000, "invented origins the origins scenario sends");
ABSL_FLAG(uint64_t, seed, 1, "the random sequences' seed");
ABSL_FLAG(std::string, id, "mallory", "the attacker's own node id");
ABSL_FLAG(int32_t, threads, 3, "attacking threads (random scenario)");
ABSL_FLAG(int32_t, invented, 3000,
          "origins the random scenario's threads invent in all (each an equal share); past the "
          "workers' --max-origins (4,096) their replicas differ for good");
ABSL_FLAG(std::string, actions, "",
          "random scenario: only these kinds of action, comma-separated (hello, update, "
          "bad_update, heartbeat, leave, refusal, rejoin, certificates, drop, status, "
          "snapshot, equivocation); empty: all but equivocation (two members sent different "
          "messages under one id)");
ABSL_FLAG(int32_t, phantoms, 40, "made-up members a heartbeat's member list names at most");
ABSL_FLAG(std::string, listen, "127.0.0.1:0",
          "where it answers members' dials (each with a permanent Refusal)");

namespace reckon::attack {
namespace {

using Clock = std::chrono::steady_clock;
using Frame = v1::GossipFrame;

// What a member learns from a worker's Status: the cluster's fingerprint and
// who the others are.
struct Cluster {
  std::vector<std::string> targets;
  std::string token;
  v1::ClusterFingerprint fingerprint;
  std::vector<v1::Origin> members;  // the targets' own (node id, incarnation)
};

// Counts by name, shared by the threads.
class Tally {
 public:
  void Add(const std::string& what, uint64_t n = 1) {
    std::lock_guard<std::mutex> l(mu_);
    counts_[what] += n;
  }
  std::string Json() {
    std::lock_guard<std::mutex> l(mu_);
    std::string out = "{";
    for (const auto& [k, v] : counts_) {
      absl::StrAppend(&out, out.size() > 1 ? ", " : "", "\"", k, "\": ", v);
    }
    return out + "}";
  }

 private:
  std::mutex mu_;
  std::map<std::string, uint64_t> counts_;
};

// Answers every dial with a permanent Refusal (the attack of issue 54: each
// member that dials the address it announced is told "never join").
class RefuseEveryDial final : public v1::Gossip::Service {
 public:
  explicit RefuseEveryDial(Tally* tally) : tally_(tally) {}
  grpc::Status Exchange(grpc::ServerContext*,
                        grpc::ServerReaderWriter<Frame, Frame>* stream) override {
    Frame hello;
    if (!stream->Read(&hello)) return grpc::Status::OK;
    Frame refusal;
    refusal.mutable_refusal()->set_permanent(true);
    refusal.mutable_refusal()->set_reason("you may never join this cluster");
    stream->Write(refusal);
    tally_->Add("dials_refused_by_us");
    return grpc::Status::OK;
  }
  grpc::Status Snapshot(grpc::ServerContext*, const v1::SnapshotRequest*,
                        grpc::ServerWriter<v1::SnapshotChunk>*) override {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "no");
  }
  grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest*, v1::NodeStatus*) override {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "no");
  }

 private:
  Tally* tally_;
};

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) {
  grpc::ChannelArguments args = server::GossipChannelArguments(server::TransportOptions{});
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// One Exchange stream, its reads drained (and counted) on a thread of its own.
class Stream {
 public:
  Stream(const std::string& address, Clock::time_point deadline, Tally* tally)
      : stub_(v1::Gossip::NewStub(ChannelTo(address))), tally_(tally) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              deadline - Clock::now()));
    rw_ = stub_->Exchange(&context_);
    reader_ = std::thread([this] {
      Frame f;
      while (rw_->Read(&f)) {
        if (f.has_refusal()) tally_->Add("refusals_read");
        tally_->Add("frames_read");
      }
      ended_ = true;
    });
  }
  ~Stream() {
    context_.TryCancel();
    reader_.join();
    rw_->Finish();
  }
  bool Send(const Frame& f) { return !ended_ && rw_->Write(f); }
  bool ended() const { return ended_; }

 private:
  std::unique_ptr<v1::Gossip::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<Frame, Frame>> rw_;
  std::thread reader_;
  std::atomic<bool> ended_{false};
  Tally* tally_;
};

// A valid Update of `origin` at `seq`: `count` distinct random indices,
// random signs, a random step, its checksum contribution.
v1::Update MakeUpdate(const Cluster& c, const v1::Origin& origin, uint64_t seq, int count,
                      std::mt19937_64& rng) {
  const uint64_t params = c.fingerprint.param_count();
  std::vector<uint32_t> words;
  std::map<uint32_t, bool> used;
  while (static_cast<int>(words.size()) < count && words.size() < params) {
    const uint32_t index = static_cast<uint32_t>(rng() % params);
    if (used.emplace(index, true).second) words.push_back(index);
  }
  std::sort(words.begin(), words.end());
  for (uint32_t& w : words) w |= static_cast<uint32_t>(rng() & 1) << 31;
  const int64_t step = int64_t{1} << (rng() % 12);  // small: a weight moves by a few quanta
  v1::Update u;
  *u.mutable_origin() = origin;
  u.set_seq(seq);
  v1::Codec codec = c.fingerprint.codec();
  if (codec != v1::CODEC_THRESHOLD_PACKED32) codec = v1::CODEC_THRESHOLD_RICE;
  if (!codec::EncodeThresholdUpdate(words, step, params, codec, &u).ok()) return u;
  u.set_checksum_delta(codec::WeightChecksum(c.fingerprint.seed()).OfUpdate(step, words));
  return u;
}

Frame HelloFrame(const Cluster& c, const std::string& id, uint64_t incarnation,
                 const std::string& listen, uint32_t lane = 0) {
  Frame f;
  v1::Hello* h = f.mutable_hello();
  *h->mutable_fingerprint() = c.fingerprint;
  h->mutable_self()->set_node_id(id);
  h->mutable_self()->set_incarnation(incarnation);
  h->set_listen_address(listen);
  h->set_cluster_token(c.token);
  h->set_lane(lane);
  return f;
}

// One attacking thread of the random scenario.
class RandomAttack {
 public:
  RandomAttack(const Cluster& c, const std::string& id, const std::string& listen, uint64_t seed,
               Clock::time_point end, Tally* tally)
      : c_(c), id_(id), listen_(listen), rng_(seed), end_(end), tally_(tally) {
    const int share = std::max(1, absl::GetFlag(FLAGS_invented) / absl::GetFlag(FLAGS_threads));
    for (int i = 0; i < share; ++i) {
      v1::Origin o;
      o.set_node_id(absl::StrCat("ghost-", seed, "-", i));
      o.set_incarnation(1 + rng_() % 3);
      invented_.push_back({o, 0});
    }
  }

  void Run() {
    // Each kind of action and its weight.
    const std::vector<std::pair<std::string, int>> kinds = {
        {"hello", 6}, {"update", 42}, {"bad_update", 10}, {"heartbeat", 12},
        {"leave", 4}, {"refusal", 4}, {"rejoin", 3},      {"certificates", 3},
        {"drop", 4},  {"status", 8},  {"snapshot", 4},    {"equivocation", 0}};
    const std::string only = absl::GetFlag(FLAGS_actions);
    const std::vector<std::string> allowed = absl::StrSplit(only, ',', absl::SkipEmpty());
    std::vector<std::pair<std::string, int>> chosen;
    int total = 0;
    for (const auto& [kind, weight] : kinds) {
      if (!only.empty() && std::find(allowed.begin(), allowed.end(), kind) == allowed.end()) {
        continue;
      }
      // Off the default mix (weight 0): only when --actions names it.
      const int w = weight > 0 ? weight : (only.empty() ? 0 : 10);
      chosen.push_back({kind, w});
      total += w;
    }
    if (total == 0) return;
    while (Clock::now() < end_) {
      int roll = static_cast<int>(rng_() % total);
      std::string kind;
      for (const auto& [k, weight] : chosen) {
        if (roll < weight) {
          kind = k;
          break;
        }
        roll -= weight;
      }
      if (member_.empty() || kind == "hello") {
        OpenStream();
      } else if (kind == "update") {
        SendInventedUpdate();
      } else if (kind == "bad_update") {
        SendBadUpdate();
      } else if (kind == "equivocation") {
        SendEquivocation();
      } else if (kind == "heartbeat") {
        SendHeartbeat();
      } else if (kind == "drop") {
        DropStream();
      } else if (kind == "status") {
        CallStatus();
      } else if (kind == "snapshot") {
        CallSnapshot();
      } else {
        SendSmall(kind);
      }
      member_.erase(std::remove_if(member_.begin(), member_.end(),
                                   [&](const std::unique_ptr<Stream>& s) {
                                     if (!s->ended()) return false;
                                     tally_->Add("streams_ended_by_target");
                                     return true;
                                   }),
                    member_.end());
    }
    member_.clear();
  }

 private:
  const std::string& Target() { return c_.targets[rng_() % c_.targets.size()]; }

  void Send(const Frame& f, const std::string& kind) {
    if (member_.empty()) return;
    Stream& s = *member_[rng_() % member_.size()];
    tally_->Add(s.Send(f) ? "sent_" + kind : "send_failed");
  }

  // A stream opened with a Hello that may be good or bad on purpose.
  void OpenStream() {
    const uint64_t kinds[] = {0, 1, 2, 3, 4, 5, 6, 7};
    const uint64_t kind = kinds[rng_() % 8];
    std::string id = id_;
    uint64_t incarnation = incarnation_;
    std::string listen = listen_;
    uint32_t lane = 0;
    Cluster c = c_;
    std::string label = "hello_member";
    switch (kind) {
      case 0:
      case 1:
        break;  // the member it is
      case 2:   // a new incarnation: odd ones
        incarnation_ = std::vector<uint64_t>{0, 1, UINT64_MAX, incarnation_ + 1,
                                             incarnation_ - 1, rng_()}[rng_() % 6];
        incarnation = incarnation_;
        label = "hello_odd_incarnation";
        break;
      case 3:  // another member's id
        if (!c_.members.empty()) {
          const v1::Origin& m = c_.members[rng_() % c_.members.size()];
          id = m.node_id();
          incarnation = rng_() % 2 ? m.incarnation() : m.incarnation() + 1;
        }
        label = "hello_other_members_id";
        break;
      case 4:  // not a valid node id
        id = std::vector<std::string>{"", "bad id!", std::string(200, 'x'), "a/b"}[rng_() % 4];
        label = "hello_bad_id";
        break;
      case 5:  // the wrong token or fingerprint
        if (rng_() % 2) {
          c.token = "wrong";
        } else {
          c.fingerprint.set_seed(c.fingerprint.seed() + 1);
        }
        label = "hello_wrong_cluster";
        break;
      case 6:  // a lane
        lane = static_cast<uint32_t>(rng_() % 20);
        label = "hello_lane";
        break;
      case 7:  // an address to dial that is junk
        listen = std::vector<std::string>{"", "127.0.0.1:1", "nowhere.invalid:7070",
                                          std::string(300, 'a')}[rng_() % 4];
        label = "hello_junk_address";
        break;
    }
    auto s = std::make_unique<Stream>(Target(), end_ + std::chrono::seconds(2), tally_);
    tally_->Add(s->Send(HelloFrame(c, id, incarnation, listen, lane)) ? "sent_" + label
                                                                       : "send_failed");
    member_.push_back(std::move(s));
    if (member_.size() > 8) member_.erase(member_.begin());
  }

  void DropStream() {
    if (member_.empty()) return;
    member_.erase(member_.begin() + static_cast<long>(rng_() % member_.size()));
    tally_->Add("streams_dropped");
  }

  void SendInventedUpdate() {
    auto& [origin, next] = invented_[rng_() % invented_.size()];
    uint64_t seq = next + 1;
    std::string kind = "update_next";
    const int roll = static_cast<int>(rng_() % 10);
    if (roll < 2) {
      seq = next + 2 + rng_() % 8;
      kind = "update_early";
    } else if (roll < 3) {
      seq = (uint64_t{1} << 40) + rng_() % 1000;
      kind = "update_seq_2_40";
    } else if (roll < 4 && next > 0) {
      seq = 1 + rng_() % next;
      kind = "update_duplicate";
    } else {
      ++next;
    }
    Frame f;
    *f.mutable_update() = ContentOf(origin, seq);
    Send(f, kind);
  }

  // An origin's message `seq`, the same each time it is made: a duplicate
  // is the message again, not another one under its id.
  v1::Update ContentOf(const v1::Origin& origin, uint64_t seq) {
    std::mt19937_64 content(std::hash<std::string>()(origin.node_id()) ^
                            (origin.incarnation() * 0x9E3779B97F4A7C15ULL) ^ (seq * 31));
    return MakeUpdate(c_, origin, seq, static_cast<int>(content() % 40), content);
  }

  // Another message under the id of one already sent, to one target (the
  // first went to whichever stream the dice chose): two members apply
  // different messages under one id. docs/gossip.md's threat model says
  // what that does (detected, the ending fails); not in the default mix,
  // whose pass condition is that the honest workers end identical.
  void SendEquivocation() {
    auto& [origin, next] = invented_[rng_() % invented_.size()];
    if (next == 0) return;
    Frame f;
    *f.mutable_update() = ContentOf(origin, 1 + rng_() % next);
    v1::Update* u = f.mutable_update();
    *u = MakeUpdate(c_, u->origin(), u->seq(), 1 + static_cast<int>(rng_() % 40), rng_);
    Send(f, "update_equivocation");
  }

  void SendBadUpdate() {
    auto& [origin, next] = invented_[rng_() % invented_.size()];
    Frame f;
    // The message next in line, spoiled below (one spoiling leaves it valid:
    // it must be the message itself, or it would be another under its id).
    *f.mutable_update() = ContentOf(origin, next + 1);
    v1::Update* u = f.mutable_update();
    std::string kind;
    switch (rng_() % 7) {
      case 0:
        u->set_checksum_delta(u->checksum_delta() + 1);
        kind = "update_bad_checksum";
        break;
      case 1:
        if (!u->payload().empty()) (*u->mutable_payload())[rng_() % u->payload().size()] ^= 0x10;
        kind = "update_flipped_payload";
        break;
      case 2:
        u->set_param_count(u->param_count() + 1);
        kind = "update_wrong_param_count";
        break;
      case 3:
        u->set_count(u->count() + 1 + rng_() % 1000000);
        kind = "update_wrong_count";
        break;
      case 4:
        u->set_seq(0);
        kind = "update_seq_0";
        break;
      case 5:
        u->mutable_origin()->set_node_id("bad id!");
        kind = "update_bad_origin";
        break;
      default: {
        // A valid Update with an unknown length-delimited field 99 of up to 64 KiB.
        const size_t n = rng_() % 65536;
        std::string unknown = std::string("\x9a\x06", 2);
        uint64_t len = n;
        while (len >= 0x80) {
          unknown.push_back(static_cast<char>(len | 0x80));
          len >>= 7;
        }
        unknown.push_back(static_cast<char>(len));
        unknown.append(n, 'u');
        u->MergeFromString(unknown);
        kind = "update_unknown_fields";
      }
    }
    Send(f, kind);
  }

  v1::VersionVector RandomVector() {
    v1::VersionVector v;
    const int n = static_cast<int>(rng_() % 50);
    for (int i = 0; i < n; ++i) {
      v1::VersionEntry* e = v.add_entries();
      if (rng_() % 3 == 0 && !c_.members.empty()) {
        *e->mutable_origin() = c_.members[rng_() % c_.members.size()];
      } else {
        *e->mutable_origin() = invented_[rng_() % invented_.size()].first;
      }
      e->set_seq(rng_() % 2 ? rng_() % 100 : rng_());
    }
    return v;
  }

  void SendHeartbeat() {
    Frame f;
    v1::Heartbeat* h = f.mutable_heartbeat();
    *h->mutable_applied() = RandomVector();
    const int phantoms = absl::GetFlag(FLAGS_phantoms);
    const int members = phantoms > 0 ? static_cast<int>(rng_() % (phantoms + 1)) : 0;
    for (int i = 0; i < members; ++i) {
      v1::Member* m = h->add_members();
      m->set_node_id(absl::StrCat("phantom-", rng_() % 2000));
      m->set_incarnation(rng_());
      m->set_address(absl::StrCat("127.0.0.1:", 1 + rng_() % 65535));
      // Not heard: a member list may name anyone, and a name nobody heard
      // counts for nothing. A liar that claims to hear made-up names
      // (heard: true) can stall the cluster's ending, as any member can by
      // never settling: docs/gossip.md's threat model says so, and
      // GossipNode.MembersNobodyHeardDoNotCountAgainstTheMajority tests it;
      // this harness checks that the cluster ends once the liar is gone.
      m->set_heard(false);
    }
    h->set_local_steps(rng_());
    h->set_training_done(rng_() % 2);
    h->set_settled(rng_() % 4 == 0);
    if (h->settled()) h->set_weight_hash(std::string(64, "0123456789abcdef"[rng_() % 16]));
    h->set_frames_received(rng_() % 1000);
    if (rng_() % 3 == 0) {
      *h->mutable_checked() = RandomVector();
      h->set_checked_checksum(rng_());
    }
    for (int i = 0, n = static_cast<int>(rng_() % 4); i < n; ++i) {
      h->add_lane_frames_received(rng_() % 100);
    }
    Send(f, "heartbeat");
  }

  void SendSmall(const std::string& kind) {
    Frame f;
    if (kind == "leave") {
      f.mutable_leave()->set_reason("bye");
    } else if (kind == "refusal") {
      f.mutable_refusal()->set_permanent(rng_() % 2);
      f.mutable_refusal()->set_reason("you may never join this cluster");
    } else if (kind == "rejoin") {
      *f.mutable_rejoin()->mutable_origin() =
          c_.members.empty() ? invented_[0].first : c_.members[rng_() % c_.members.size()];
      f.mutable_rejoin()->set_first_retained_seq(rng_());
    } else {
      for (int i = 0, n = static_cast<int>(rng_() % 6); i < n; ++i) {
        f.mutable_certificates()->add_pem(std::string(rng_() % 20000, 'c'));
      }
    }
    Send(f, kind);
  }

  void CallStatus() {
    auto stub = v1::Gossip::NewStub(ChannelTo(Target()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::StatusRequest request;
    if (rng_() % 4) request.set_cluster_token(c_.token);
    v1::NodeStatus status;
    const grpc::Status s = stub->Status(&context, request, &status);
    tally_->Add(s.ok() ? "status_answered" : "status_refused");
  }

  void CallSnapshot() {
    auto stub = v1::Gossip::NewStub(ChannelTo(Target()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::SnapshotRequest request;
    *request.mutable_fingerprint() = c_.fingerprint;
    request.mutable_requester()->set_node_id(rng_() % 2 ? id_ : "phantom-1");
    request.mutable_requester()->set_incarnation(incarnation_);
    request.set_cluster_token(c_.token);
    request.set_header_only(rng_() % 2);
    request.set_stripes(static_cast<uint32_t>(rng_() % 40));
    if (rng_() % 3 == 0) request.set_cut_id(rng_());
    request.set_stripe(static_cast<uint32_t>(rng_() % 40));
    request.set_for_export(rng_() % 2);
    auto reader = stub->Snapshot(&context, request);
    v1::SnapshotChunk chunk;
    int chunks = 0;
    while (chunks < 3 && reader->Read(&chunk)) ++chunks;  // then walks away
    context.TryCancel();
    reader->Finish();
    tally_->Add(chunks > 0 ? "snapshot_started" : "snapshot_refused");
  }

  const Cluster& c_;
  const std::string id_;
  const std::string listen_;
  std::mt19937_64 rng_;
  const Clock::time_point end_;
  Tally* tally_;
  uint64_t incarnation_ = 7;
  std::vector<std::unique_ptr<Stream>> member_;
  std::vector<std::pair<v1::Origin, uint64_t>> invented_;  // and its next seq
};

// Says Leave, on every target, for each member entry of the attacker's own
// ids (`ids`, in whatever incarnation took them last): a member that leaves
// counts for nothing in the ending. One that dies without leaving counts as
// a member that may be training elsewhere, and stalls the ending, as any
// member can (docs/gossip.md "Threat model"): the harness checks that the
// cluster ends once the attacker is gone.
void LeaveEverywhere(const Cluster& c, const std::vector<std::string>& ids,
                     const std::string& listen, Tally* tally) {
  for (const std::string& target : c.targets) {
    absl::StatusOr<v1::NodeStatus> status =
        server::FetchStatus(target, std::chrono::seconds(5), {}, c.token);
    if (!status.ok()) continue;
    for (const v1::MemberStatus& m : status->members()) {
      if (std::find(ids.begin(), ids.end(), m.node_id()) == ids.end() || m.state() == "left") {
        continue;
      }
      Stream s(target, Clock::now() + std::chrono::seconds(5), tally);
      Frame leave;
      leave.mutable_leave()->set_reason("the attack is over");
      if (s.Send(HelloFrame(c, m.node_id(), m.incarnation(), listen)) && s.Send(leave)) {
        tally->Add("left");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

// `count` invented origins at seq 2, one small valid Update each, on one
// member stream.
void FloodOrigins(const Cluster& c, const std::string& id, const std::string& listen,
                  int64_t count, uint64_t seed, Tally* tally) {
  std::mt19937_64 rng(seed);
  const auto end = Clock::now() + std::chrono::hours(1);
  Stream s(c.targets[0], end, tally);
  if (!s.Send(HelloFrame(c, id, 7, listen))) {
    tally->Add("send_failed");
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    v1::Origin origin;
    origin.set_node_id(absl::StrCat("ghost", i));
    origin.set_incarnation(1);
    Frame f;
    *f.mutable_update() = MakeUpdate(c, origin, 2, 1 + static_cast<int>(rng() % 4), rng);
    if (!s.Send(f)) {
      tally->Add("send_failed");
      return;
    }
    tally->Add("sent_update_early");
  }
  // Let the target take in what is on its way before the stream closes.
  std::this_thread::sleep_for(std::chrono::seconds(1));
}

int Main() {
  Cluster c;
  c.targets = absl::StrSplit(absl::GetFlag(FLAGS_targets), ',', absl::SkipEmpty());
  c.token = absl::GetFlag(FLAGS_token);
  if (c.targets.empty()) {
    std::cerr << "reckon-attacker: --targets is required\n";
    return 2;
  }
  for (const std::string& target : c.targets) {
    absl::StatusOr<v1::NodeStatus> status =
        server::FetchStatus(target, std::chrono::seconds(10), {}, c.token);
    if (!status.ok()) {
      std::cerr << "reckon-attacker: Status of " << target << ": " << status.status() << "\n";
      return 1;
    }
    c.fingerprint = status->fingerprint();
    v1::Origin self;
    self.set_node_id(status->node_id());
    self.set_incarnation(status->incarnation());
    c.members.push_back(self);
  }
  Tally tally;
  // The address it announces: every member that dials it is refused for good.
  RefuseEveryDial refuser(&tally);
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&refuser);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "reckon-attacker: cannot listen on " << listen << "\n";
    return 1;
  }
  const std::string announced =
      absl::StrCat(listen.substr(0, listen.rfind(':')), ":", port);
  const std::string id = absl::GetFlag(FLAGS_id);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const auto start = Clock::now();
  if (absl::GetFlag(FLAGS_scenario) == "origins") {
    FloodOrigins(c, id, announced, absl::GetFlag(FLAGS_origins), seed, &tally);
  } else if (absl::GetFlag(FLAGS_scenario) == "random") {
    const auto end = start + std::chrono::milliseconds(
                                 static_cast<int64_t>(absl::GetFlag(FLAGS_seconds) * 1000));
    std::vector<std::thread> threads;
    for (int t = 0; t < absl::GetFlag(FLAGS_threads); ++t) {
      threads.emplace_back([&, t] {
        RandomAttack(c, t == 0 ? id : absl::StrCat(id, "-", t), announced, seed * 1000 + t, end,
                     &tally)
            .Run();
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<std::string> ids;
    for (int t = 0; t < absl::GetFlag(FLAGS_threads); ++t) {
      ids.push_back(t == 0 ? id : absl::StrCat(id, "-", t));
    }
    LeaveEverywhere(c, ids, announced, &tally);
  } else {
    std::cerr << "reckon-attacker: --scenario is random or origins\n";
    return 2;
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << "{\"scenario\": \"" << absl::GetFlag(FLAGS_scenario) << "\", \"seconds\": "
            << seconds << ", \"announced\": \"" << announced << "\", \"counts\": " << tally.Json()
            << "}" << std::endl;
  return 0;
}

}  // namespace
}  // namespace reckon::attack

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return reckon::attack::Main();
}
