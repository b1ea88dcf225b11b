#include "server/node.h"

#include <google/protobuf/util/json_util.h>
#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "codec/codec.h"
#include "server/anti_entropy.h"
#include "server/lanes.h"
#include "server/membership.h"

namespace reckon::server {
namespace {

double SecondsSince(Clock::time_point t, Clock::time_point now) {
  return std::chrono::duration<double>(now - t).count();
}

// The metrics label of a wire codec (Counters::updates_received).
std::string CodecLabel(v1::Codec codec) {
  if (codec == v1::CODEC_THRESHOLD_RICE) return "rice";
  if (codec == v1::CODEC_THRESHOLD_PACKED32) return "packed32";
  return codec::CodecFlagName(codec);
}

}  // namespace

bool ValidNodeId(const std::string& id) {
  if (id.empty() || id.size() > 63) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string NodeStatusJson(const v1::NodeStatus& status) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  // Printing a message we built cannot fail; an empty object if it ever did.
  if (!google::protobuf::util::MessageToJsonString(status, &json, options).ok()) return "{}\n";
  return json;
}

absl::StatusOr<std::unique_ptr<GossipNode>> GossipNode::Create(NodeOptions options,
                                                               std::span<const int64_t> initial,
                                                               int fraction_bits) {
  if (!ValidNodeId(options.node_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node id '", options.node_id, "' must be 1-63 characters of [A-Za-z0-9._-]"));
  }
  absl::StatusOr<codec::FixedPointReplica> mirror =
      codec::FixedPointReplica::Create(initial.size(), fraction_bits);
  if (!mirror.ok()) return mirror.status();
  absl::Status s = mirror->Load(initial);
  if (!s.ok()) return s;
  std::unique_ptr<UpdateSigner> signer;
  if (options.tls.enabled()) {
    absl::StatusOr<std::unique_ptr<UpdateSigner>> made = UpdateSigner::Create(options.tls.key_pem);
    if (!made.ok()) return made.status();
    signer = *std::move(made);
  }
  auto node = std::unique_ptr<GossipNode>(new GossipNode(std::move(options), *std::move(mirror)));
  if (signer) {
    node->signer_ = std::move(signer);
    absl::MutexLock l(&node->mu_);
    node->certificates_.emplace(node->options_.tls.ca_pem);
    absl::StatusOr<std::string> own = node->certificates_->Add(node->options_.tls.cert_pem);
    if (!own.ok()) return own.status();
  }
  return node;
}

GossipNode::GossipNode(NodeOptions options, codec::FixedPointReplica mirror)
    : options_(std::move(options)),
      self_{options_.node_id, options_.incarnation},
      inbox_(options_.inbox_byte_cap),
      mirror_(std::move(mirror)),
      checksum_(options_.fingerprint.seed()),
      early_(options_.early_arrival_cap, options_.early_arrival_byte_cap),
      log_(options_.log_byte_cap, options_.log_min_retention),
      dial_(DialSchedule::Options{options_.initial_backoff, options_.max_backoff,
                                  2 * options_.failure_timeout,
                                  // every member's address once, and the seeds
                                  options_.max_members + options_.seeds.size() + 1},
            options_.incarnation),
      pending_(PendingHandshakes::Options{options_.max_pending_handshakes,
                                          options_.hello_timeout}),
      started_(Clock::now()) {
  ledger_.Reset(checksum_.Of(mirror_.quanta()), {});
}

GossipNode::~GossipNode() { Stop(false, std::chrono::milliseconds(0)); }

void GossipNode::Log(const std::string& line) {
  // One write per line: nodes sharing a process (the transport bench) do not
  // interleave within a line.
  const std::string whole = absl::StrCat("reckon-gossip[", options_.node_id, "]: ", line, "\n");
  absl::MutexLock l(&log_mu_);
  std::cerr.write(whole.data(), static_cast<std::streamsize>(whole.size()));
  std::cerr.flush();
}

void GossipNode::Start(Dialer dialer) {
  absl::MutexLock l(&mu_);
  dialer_ = std::move(dialer);
  started_ = Clock::now();
  dial_.MarkSelf(options_.listen_address);
  for (const std::string& seed : options_.seeds) {
    dial_.Pin(seed);
    dial_.Learn(seed, started_);
  }
  started_flag_.store(true);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "reckon-gossip");
    Run();
  });
}

void GossipNode::Stop(bool leave, std::chrono::milliseconds flush) {
  std::vector<std::shared_ptr<Link>> links, told;
  {
    absl::MutexLock l(&mu_);
    if (stopping_) return;
    stopping_ = true;
    inbox_.Stop();
    auto leave_frame = std::make_shared<v1::GossipFrame>();
    leave_frame->mutable_leave()->set_reason("shutting down");
    for (auto& [id, m] : members_) {
      if (!m.link) continue;
      if (leave) {
        SendCounted(*m.link, leave_frame);
        told.push_back(m.link);
      }
      links.push_back(m.link);
      for (const auto& [index, lane] : m.out_lanes) links.push_back(lane.link);
      for (const auto& [index, lane] : m.in_lanes) links.push_back(lane.link);
    }
    for (auto& link : pending_.All()) links.push_back(std::move(link));
    for (auto& link : dial_.Pending()) links.push_back(std::move(link));
    changed_.SignalAll();
  }
  const auto deadline = Clock::now() + flush;
  // A member drops its stream when our Leave arrives: until each has, the
  // Leave (and the settled heartbeats before it) may still be on its way,
  // and closing now (a process exit resets the connection) could lose the
  // last word a member waits for to end. Seen on lossy links.
  while (!inbox_.ClosedSinceStop(told) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (const auto& link : links) {
    while (link->QueuedBytes() > 0 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    link->Close();
  }
  if (thread_.joinable()) thread_.join();
}

// --- events from links: enqueue only -------------------------------------

void GossipNode::OnLinkUp(const std::shared_ptr<Link>& link) { inbox_.PushUp(link); }

bool GossipNode::OnFrame(const std::shared_ptr<Link>& link, v1::GossipFrame frame) {
  return inbox_.PushFrame(link, std::move(frame));
}

size_t GossipNode::InboxBytes() { return inbox_.bytes(); }

void GossipNode::OnLinkClosed(const std::shared_ptr<Link>& link, const std::string& why) {
  inbox_.PushClosed(link, why);
}

// --- the node thread --------------------------------------------------------

void GossipNode::Run() {
  Clock::time_point next_tick = Clock::now();
  for (;;) {
    // Only the inbox's lock while waiting: a transport thread enqueueing a
    // frame never waits behind mu_ (whoever holds it).
    Inbox::Batch batch;
    if (!inbox_.Take(next_tick, &batch)) return;
    last_loop_ns_.store(Clock::now().time_since_epoch().count());
    if (!HandleBatch(batch.events, next_tick)) return;
    batch.events.clear();  // its frames' memory goes before their links read on
    for (const std::shared_ptr<Link>& link : batch.to_resume) link->ResumeReading();
  }
}

bool GossipNode::HandleBatch(std::deque<Inbox::Event>& batch, Clock::time_point& next_tick) {
  absl::MutexLock l(&mu_);
  if (stopping_) return false;
  // Ticks come due inside a long batch too (a backlog of large messages
  // on a loaded machine takes seconds): the heartbeats that tell peers
  // this node is alive must not wait for the backlog to drain.
  auto tick_if_due = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // mu_ is held
    const auto now = Clock::now();
    if (now < next_tick) return;
    Tick(now);
    next_tick = now + options_.heartbeat_interval;
  };
  for (Inbox::Event& e : batch) {
    HandleEvent(e);
    tick_if_due();
  }
  tick_if_due();
  changed_.SignalAll();
  return true;
}

Member* GossipNode::FindByLink(const std::shared_ptr<Link>& link) {
  for (auto& [id, m] : members_) {
    if (m.link == link) return &m;
  }
  return nullptr;
}

void GossipNode::HandleEvent(Inbox::Event& e) {
  const auto now = Clock::now();
  switch (e.kind) {
    case Inbox::Event::kUp:
      AwaitHello(e.link, now);
      return;
    case Inbox::Event::kClosed:
      HandleLinkClosed(e.link, e.why, now);
      return;
    case Inbox::Event::kFrame:
      break;
  }
  v1::GossipFrame& f = e.frame;
  counters_.set_bytes_received(counters_.bytes_received() + e.frame_bytes);
  if (f.has_hello()) {
    HandleHello(e.link, f.hello());
    return;
  }
  if (f.has_refusal()) {
    Log(absl::StrCat("refused by ", e.link->Describe(), ": ", f.refusal().reason().substr(0, 200)));
    // A Refusal is believed only as the answer to our own Hello: on a
    // stream we dialed whose handshake has not completed. Anyone can open a
    // stream to us and send one (an outsider without the token, any
    // holder of a certificate of the CA): on a stream we accepted, or after
    // a handshake, it only ends that stream. A lane refused is only a lane
    // lost (dialed again later): the member's stream took us, so it is of
    // this cluster.
    const bool answer_to_our_hello = e.link->dialed() && pending_.Contains(e.link);
    if (answer_to_our_hello && f.refusal().permanent() && fatal_.ok()) {
      fatal_ = absl::FailedPreconditionError(
          absl::StrCat("refused by peer ", e.link->Describe(), ": ", f.refusal().reason()));
    }
    e.link->Close();
    return;
  }
  Member* m = FindByLink(e.link);
  if (m == nullptr) {
    // A lane's, or a frame before a handshake (a protocol error: ignored).
    HandleLaneFrame(e.link, f, now);
    return;
  }
  m->last_heard = now;
  // Only updates are counted (the loss evidence of anti-entropy): a
  // heartbeat may overtake the updates queued before it (Link::SendUrgent).
  if (f.has_update()) ++m->frames_received;
  if (m->state != MemberState::kAlive) {
    Log(absl::StrCat("peer ", m->node_id, " is alive again"));
    m->state = MemberState::kAlive;
    m->alive_since = now;
    RebuildRing();
  }
  if (f.has_update()) {
    HandleUpdate(*m, std::make_shared<v1::GossipFrame>(std::move(f)));
  } else if (f.has_certificates()) {
    if (certificates_) {
      LearnCertificates(m, {f.certificates().pem().begin(), f.certificates().pem().end()});
    }
  } else if (f.has_heartbeat()) {
    HandleHeartbeat(*m, f.heartbeat(), now);
  } else if (f.has_leave()) {
    Log(absl::StrCat("peer ", m->node_id, " left: ", f.leave().reason()));
    m->state = MemberState::kLeft;
    DropLink(*m);
    RebuildRing();
  } else if (f.has_resync()) {
    const OriginKey origin = KeyOf(f.resync().origin());
    if (SeqOf(applied_, origin) + 1 < f.resync().first_retained_seq() && !resync_source_) {
      Log(absl::StrCat("fell out of ", m->node_id, "'s log for ", origin.ToString(), " (we have ",
                       SeqOf(applied_, origin), ", it keeps from ", f.resync().first_retained_seq(),
                       "): re-joining from a snapshot"));
      resync_source_ = m->address;
    }
  }
}

void GossipNode::MoveMember(Member& m, const std::string& address, Clock::time_point now) {
  if (m.address == address) return;
  if (!m.address.empty()) {
    // Its old address is dialed no more (unless it is a seed): an old pod
    // IP would otherwise be redialed forever, and another process may
    // listen there by now.
    if (std::shared_ptr<Link> pending = dial_.Forget(m.address)) {
      pending_.Remove(pending);
      pending->Abort();
    }
  }
  m.address = address;
  if (!dial_.Learn(address, now)) {
    counters_.set_dial_targets_refused(counters_.dial_targets_refused() + 1);
    Log(absl::StrCat("not dialing ", address.substr(0, 64), " for ", m.node_id, ": ",
                     dial_.targets(), " addresses known already"));
  }
}

void GossipNode::AwaitHello(const std::shared_ptr<Link>& link, Clock::time_point now) {
  for (const std::shared_ptr<Link>& evicted : pending_.Add(link, now)) {
    counters_.set_handshakes_evicted(counters_.handshakes_evicted() + 1);
    Log(absl::StrCat("closing ", evicted->Describe(), ": no Hello yet, and ",
                     options_.max_pending_handshakes, " streams wait for theirs"));
    evicted->Abort();
  }
}

void GossipNode::CloseSilentStreams(Clock::time_point now) {
  for (const std::shared_ptr<Link>& silent : pending_.TakeExpired(now)) {
    counters_.set_hello_timeouts(counters_.hello_timeouts() + 1);
    Log(absl::StrCat("closing ", silent->Describe(), ": no Hello within ",
                     options_.hello_timeout.count(), " ms"));
    silent->Abort();
  }
}

void GossipNode::HandleLinkClosed(const std::shared_ptr<Link>& link, const std::string& why,
                                  Clock::time_point now) {
  inbox_.Forget(link.get());
  pending_.Remove(link);
  dial_.Closed(link);
  if (Member* m = FindByLink(link)) {
    Log(absl::StrCat("stream to ", m->node_id, " closed: ", why));
    m->link.reset();
    ResetStream(*m);
    DropLanes(*m);
  } else if (LaneRef lane = FindLane(link); lane.member != nullptr) {
    if (lane.dialed) {
      Log(absl::StrCat("lane ", lane.index, " to ", lane.member->node_id, " closed: ", why));
    }
    ForgetLane(lane, now);
  }
}

absl::Status GossipNode::CheckPeer(const v1::ClusterFingerprint& theirs, const std::string& token,
                                   const std::string& peer) const {
  const v1::ClusterFingerprint& ours = options_.fingerprint;
  // Names both nodes, so the line reads the same in either one's log.
  auto differs = [&](const std::string& field, const auto& there, const auto& here) {
    return absl::FailedPreconditionError(absl::StrCat("cluster fingerprint mismatch: ", field,
                                                      " is ", there, " on '", peer.substr(0, 64),
                                                      "' but ", here, " on '", self_.node_id, "'"));
  };
  if (theirs.protocol_version() != ours.protocol_version()) {
    return differs("protocol version", theirs.protocol_version(), ours.protocol_version());
  }
  if (theirs.model() != ours.model()) return differs("model", theirs.model(), ours.model());
  if (theirs.param_count() != ours.param_count()) {
    return differs("param count", theirs.param_count(), ours.param_count());
  }
  if (theirs.fraction_bits() != ours.fraction_bits()) {
    return differs("fraction bits", theirs.fraction_bits(), ours.fraction_bits());
  }
  if (theirs.codec() != ours.codec()) {
    return differs("codec", v1::Codec_Name(theirs.codec()), v1::Codec_Name(ours.codec()));
  }
  if (theirs.seed() != ours.seed()) return differs("seed", theirs.seed(), ours.seed());
  if (theirs.overlay() != ours.overlay()) {
    return differs("overlay", v1::GossipOverlay_Name(theirs.overlay()),
                   v1::GossipOverlay_Name(ours.overlay()));
  }
  if (theirs.pretrain_samples() != ours.pretrain_samples()) {
    return differs("pretrain samples", theirs.pretrain_samples(), ours.pretrain_samples());
  }
  return CheckToken(token);
}

absl::Status GossipNode::CheckToken(const std::string& token) const {
  if (!options_.cluster_token.empty() && !TokenMatches(token, options_.cluster_token)) {
    return absl::PermissionDeniedError("cluster token does not match");
  }
  return absl::OkStatus();
}

std::optional<uint64_t> GossipNode::ChecksumAt(const VersionMap& at) {
  absl::MutexLock l(&mu_);
  return ledger_.At(at);
}

std::vector<std::string> GossipNode::LiveMemberAddresses(const std::string& except) {
  absl::MutexLock l(&mu_);
  std::vector<std::string> out;
  for (const auto& [id, m] : members_) {
    if (m.state == MemberState::kAlive && !m.address.empty() && m.address != except) {
      out.push_back(m.address);
    }
  }
  return out;
}


std::shared_ptr<const v1::GossipFrame> GossipNode::MakeHello(uint32_t lane) const {
  auto frame = std::make_shared<v1::GossipFrame>();
  v1::Hello* h = frame->mutable_hello();
  if (lane == 0) {
    h->set_lanes_accepted(kMaxLanes);
  } else {
    h->set_lane(lane);
  }
  *h->mutable_fingerprint() = options_.fingerprint;
  h->mutable_self()->set_node_id(self_.node_id);
  h->mutable_self()->set_incarnation(self_.incarnation);
  h->set_listen_address(options_.listen_address);
  h->set_cluster_token(options_.cluster_token);
  return frame;
}

void GossipNode::Refuse(const std::shared_ptr<Link>& link, const std::string& peer,
                        const std::string& reason, bool permanent) {
  Log(absl::StrCat("refusing ", link->Describe(), " (node '", peer.substr(0, 64), "'): ", reason));
  if (!link->dialed()) {
    auto frame = std::make_shared<v1::GossipFrame>();
    frame->mutable_refusal()->set_reason(reason);
    frame->mutable_refusal()->set_permanent(permanent);
    SendCounted(*link, frame);
  } else if (permanent && fatal_.ok()) {
    fatal_ = absl::FailedPreconditionError(
        absl::StrCat("peer ", link->Describe(), " is not of this cluster: ", reason));
  }
  pending_.Remove(link);
  link->Close();
}

HelloVerdict GossipNode::Judge(const Link& link, const v1::Hello& hello) const {
  HelloContext context;
  context.self = self_;
  context.fingerprint_and_token =
      CheckPeer(hello.fingerprint(), hello.cluster_token(), hello.self().node_id());
  context.require_identity = options_.require_peer_identity;
  context.peer_identity = link.PeerIdentity();
  context.members = &members_;
  context.max_members = options_.max_members;
  return JudgeHello(hello, context);
}

void GossipNode::HandleHello(const std::shared_ptr<Link>& link, const v1::Hello& hello) {
  const auto now = Clock::now();
  if (hello.lane() != 0) {
    HandleLaneHello(link, hello);
    return;
  }
  if (!pending_.Contains(link)) return;  // a second Hello: ignore
  const std::string& id = hello.self().node_id();
  const HelloVerdict verdict = Judge(*link, hello);
  if (verdict.kind == HelloVerdict::kSelfDial) {
    // We dialed ourselves (our address is in the seed list): remember it.
    dial_.DialedSelf(link);
    pending_.Remove(link);
    link->Close();
    return;
  }
  if (verdict.kind == HelloVerdict::kRefuse) {
    if (verdict.over_member_cap) {
      counters_.set_members_refused(counters_.members_refused() + 1);
    } else {
      counters_.set_peers_refused(counters_.peers_refused() + 1);
    }
    Refuse(link, id, verdict.reason, verdict.permanent);
    return;
  }
  Member& m = members_[id];
  if (m.node_id.empty()) {
    m.node_id = id;
    m.first_known = now;
  }
  if (hello.self().incarnation() > m.incarnation) {
    if (m.incarnation != 0) {
      Log(absl::StrCat("peer ", id, " restarted as incarnation ", hello.self().incarnation()));
    }
    m.incarnation = hello.self().incarnation();
    m.applied.clear();
    m.ever_sent.clear();
    m.training_done = false;
    m.settled = false;
    m.weight_hash.clear();
    if (m.link) DropLink(m);
  }
  m.lanes_accepted = std::min(hello.lanes_accepted(), kMaxLanes);
  pending_.Remove(link);
  dial_.Handshaken(link);  // before MoveMember, which may forget the address it was dialed at
  if (!hello.listen_address().empty()) MoveMember(m, hello.listen_address(), now);
  if (!link->dialed()) SendCounted(*link, MakeHello());
  if (m.link && m.link != link) {
    // Two streams for one pair (both dialed at once): both ends keep the one
    // dialed by the smaller node id, so they agree without talking.
    if (KeepsStream(self_.node_id, id, link->dialed())) {
      DropLink(m);
    } else {
      link->Close();
      return;
    }
  }
  m.link = link;
  ResetStream(m);
  m.last_heard = now;
  if (certificates_) {
    // Its handshake certificate first, then everything we know goes to it
    // before any Update can: relayed messages are always verifiable.
    LearnCertificates(&m, {link->PeerCertificate()});
    auto frame = std::make_shared<v1::GossipFrame>();
    for (std::string& pem : certificates_->All()) {
      frame->mutable_certificates()->add_pem(std::move(pem));
    }
    SendTo(m, frame, SIZE_MAX);
  }
  if (m.state != MemberState::kAlive) {
    Log(absl::StrCat("peer ", id, " (incarnation ", m.incarnation,
                     ") connected: ", link->Describe()));
  }
  m.alive_since = now;
  m.state = MemberState::kAlive;
  RebuildRing();
  reached_any_ = true;
  SendTo(m, HeartbeatFor(m, *MakeHeartbeat()), SIZE_MAX);
}

void GossipNode::HandleLaneHello(const std::shared_ptr<Link>& link, const v1::Hello& hello) {
  if (LaneRef ours = FindLane(link); ours.member != nullptr) {
    if (!ours.dialed) return;  // a second Hello on a lane: ignore
    // The member's answer to our lane: it must be the member we dialed.
    Member& m = *ours.member;
    Lane& lane = m.out_lanes[ours.index];
    if (lane.up) return;
    if (hello.self().node_id() != m.node_id || hello.self().incarnation() != m.incarnation ||
        hello.lane() != ours.index) {
      Log(absl::StrCat("lane ", ours.index, " to ", m.node_id, " was answered by '",
                       hello.self().node_id().substr(0, 64), "' incarnation ",
                       hello.self().incarnation(), " lane ", hello.lane(), ": closed"));
      ForgetLane(ours, Clock::now());
      return;
    }
    lane.up = true;
    return;
  }
  if (!pending_.Contains(link)) return;
  const std::string& id = hello.self().node_id();
  HelloVerdict verdict = Judge(*link, hello);
  if (verdict.kind == HelloVerdict::kSelfDial) {
    verdict = {HelloVerdict::kRefuse, "a lane to this node itself", false};
  }
  if (verdict.kind == HelloVerdict::kAdmit) {
    if (std::optional<std::string> why = LaneRefusal(hello, members_)) {
      verdict = {HelloVerdict::kRefuse, *why, false};
    }
  }
  if (verdict.kind == HelloVerdict::kRefuse) {
    counters_.set_peers_refused(counters_.peers_refused() + 1);
    Refuse(link, id, verdict.reason, verdict.permanent);
    return;
  }
  Member& m = members_[id];
  pending_.Remove(link);
  Lane& lane = m.in_lanes[hello.lane()];
  if (lane.link) lane.link->Abort();  // the member dialed that lane again
  lane = Lane{link, true, Clock::now(), 0};
  SendCounted(*link, MakeHello(hello.lane()));
}

void GossipNode::HandleLaneFrame(const std::shared_ptr<Link>& link, v1::GossipFrame& frame,
                                 Clock::time_point now) {
  const LaneRef ref = FindLane(link);
  if (ref.member == nullptr) return;
  Member& m = *ref.member;
  if (ref.dialed || !frame.has_update()) {
    // Lanes carry the dialer's Updates only: a member that sends anything
    // else on one (membership, a heartbeat it could forge a count with)
    // loses the lane, and nothing of the frame is kept.
    const char* kind = frame.body_case() == v1::GossipFrame::kHeartbeat ? "a Heartbeat"
                       : frame.has_update()                            ? "an Update"
                                                                       : "a non-Update frame";
    Log(absl::StrCat("lane ", ref.index, ref.dialed ? " to " : " from ", m.node_id, " carried ",
                     kind, ", which lanes do not: closed"));
    // At once: frames of it already in the inbox find no lane.
    ForgetLane(ref, now);
    return;
  }
  m.last_heard = now;
  ++m.in_lanes[ref.index].frames;
  HandleUpdate(m, std::make_shared<v1::GossipFrame>(std::move(frame)));
}

GossipNode::LaneRef GossipNode::FindLane(const std::shared_ptr<Link>& link) {
  for (auto& [id, m] : members_) {
    for (const auto& [index, lane] : m.out_lanes) {
      if (lane.link == link) return {&m, index, true};
    }
    for (const auto& [index, lane] : m.in_lanes) {
      if (lane.link == link) return {&m, index, false};
    }
  }
  return {};
}

void GossipNode::ForgetLane(const LaneRef& lane, Clock::time_point now) {
  Member& m = *lane.member;
  auto& lanes = lane.dialed ? m.out_lanes : m.in_lanes;
  auto it = lanes.find(lane.index);
  if (it == lanes.end()) return;
  it->second.link->Abort();
  lanes.erase(it);
  if (!lane.dialed) return;
  // What went on it and was not processed is lost: served again from the
  // member's vector (what is merely late arrives as a duplicate, dropped).
  // A lane lost waits before it is dialed again.
  m.pushed.clear();
  m.pushed_frame.clear();
  m.lanes_after = now + options_.failure_timeout;
}

void GossipNode::DropLanes(Member& m) {
  for (auto& [index, lane] : m.out_lanes) lane.link->Abort();
  for (auto& [index, lane] : m.in_lanes) lane.link->Abort();
  m.out_lanes.clear();
  m.in_lanes.clear();
}

void GossipNode::DialLanes(Member& m, Clock::time_point now) {
  if (!dialer_ || m.state != MemberState::kAlive) return;
  for (auto& [index, lane] : m.out_lanes) {
    // As any dial, two failure timeouts for the answer (a round trip).
    if (!lane.up && now - lane.dialed_at > 2 * options_.failure_timeout) lane.link->Abort();
  }
  const uint32_t wanted = std::min({options_.lanes, m.lanes_accepted, kMaxLanes});
  if (!m.wants_lanes || now < m.lanes_after || m.address.empty()) return;
  for (uint32_t index = 1; index <= wanted; ++index) {
    if (m.out_lanes.count(index)) continue;
    std::shared_ptr<Link> link = dialer_(m.address);
    if (!link) return;
    m.out_lanes[index] = Lane{link, false, now, 0};
    SendCounted(*link, MakeHello(index));
  }
}

size_t GossipNode::LeastQueued(const Member& m) const {
  size_t least = m.link ? m.link->QueuedBytes() : 0;
  for (const auto& [index, lane] : m.out_lanes) {
    if (lane.up) least = std::min(least, lane.link->QueuedBytes());
  }
  return least;
}

void GossipNode::HandleUpdate(Member& from, std::shared_ptr<v1::GossipFrame> frame) {
  const v1::Update& update = frame->update();
  const OriginKey origin = KeyOf(update.origin());
  if (!ValidNodeId(origin.node_id) || update.seq() == 0) {
    counters_.set_decode_errors(counters_.decode_errors() + 1);
    Log(absl::StrCat("dropped an Update from ", from.node_id, ": origin or seq is not valid"));
    return;
  }
  const uint64_t have = SeqOf(applied_, origin);
  if (origin == self_ || update.seq() <= have || early_.Holds(origin, update.seq())) {
    counters_.set_duplicates_dropped(counters_.duplicates_dropped() + 1);
    return;
  }
  if (have == 0 && !applied_.count(origin) && applied_.size() >= options_.max_origins &&
      !CurrentMemberOrigin(origin)) {
    // A new origin past the cap: dropped before anything is spent on it.
    // A member's current incarnation always gets in (members are capped on
    // their own), so invented origins cannot lock out a real one.
    counters_.set_origins_refused(counters_.origins_refused() + 1);
    if (counters_.origins_refused() % 1000 == 1) {  // a flood must not flood the log
      Log(absl::StrCat("dropped an Update of a new origin ", origin.ToString().substr(0, 96),
                       " from ", from.node_id, ": ", applied_.size(), " origins known (",
                       counters_.origins_refused(), " dropped so far)"));
    }
    return;
  }
  if (certificates_) {
    // Before anything else is spent on it: only its origin can have made it.
    if (absl::Status v = certificates_->Verify(update); !v.ok()) {
      counters_.set_signature_errors(counters_.signature_errors() + 1);
      if (counters_.signature_errors() % 1000 == 1) {  // a flood must not flood the log
        Log(absl::StrCat("refused Update ", origin.ToString().substr(0, 96), " seq ", update.seq(),
                         " from ", from.node_id, ": ", v.message(), " (",
                         counters_.signature_errors(), " refused so far)"));
      }
      return;
    }
  }
  // Validate everything before anything is kept (docs/wire.md §3.2).
  auto decoded = std::make_shared<codec::DecodedUpdate>();
  absl::Status s = codec::DecodeUpdate(update, decoded.get());
  if (s.ok() && decoded->param_count != mirror_.param_count()) {
    s = absl::DataLossError(absl::StrCat("param_count ", decoded->param_count,
                                         " but this cluster's model has ", mirror_.param_count()));
  }
  if (s.ok()) {
    // The origin's own account of what the message adds to the replica:
    // header fields the CRC does not cover (step_quanta), or an encoder and
    // decoder that disagree, would make replicas differ silently.
    const uint64_t contribution = codec::ChecksumContribution(checksum_, *decoded);
    if (contribution != update.checksum_delta()) {
      s = absl::DataLossError(
          absl::StrCat("its checksum_delta ", codec::ChecksumHex(update.checksum_delta()),
                       " is not its words' ", codec::ChecksumHex(contribution)));
    }
  }
  if (!s.ok()) {
    counters_.set_decode_errors(counters_.decode_errors() + 1);
    Log(absl::StrCat("dropped Update ", origin.ToString(), " seq ", update.seq(), " from ",
                     from.node_id, ": ", s.message()));
    return;
  }
  if (update.seq() > have + 1) {
    // Early: wait for the gap to fill (anti-entropy fills it). A drop here
    // is a loss the sender learns of from our heartbeat, and repairs.
    if (!early_.Keep(origin, update.seq(), {frame, decoded})) counters_.set_early_dropped(counters_.early_dropped() + 1);
    return;
  }
  Accept(origin, frame, decoded);
  AcceptWaiting(origin);
}

bool GossipNode::CurrentMemberOrigin(const OriginKey& origin) const {
  auto m = members_.find(origin.node_id);
  return m != members_.end() && m->second.incarnation == origin.incarnation;
}

void GossipNode::AcceptWaiting(const OriginKey& origin) {
  while (std::optional<EarlyArrivals::Arrival> next =
             early_.TakeNext(origin, SeqOf(applied_, origin))) {
    Accept(origin, next->frame, next->decoded);
  }
}

void GossipNode::Accept(const OriginKey& origin, std::shared_ptr<const v1::GossipFrame> frame,
                        std::shared_ptr<const codec::DecodedUpdate> decoded) {
  absl::Status s = codec::ApplyDecoded(*decoded, &mirror_);
  if (!s.ok()) {
    // Validated already; only an int64 overflow can get here.
    counters_.set_decode_errors(counters_.decode_errors() + 1);
    Log(absl::StrCat("could not apply ", origin.ToString(), " seq ", frame->update().seq(), ": ",
                     s.message()));
    return;
  }
  applied_[origin] = frame->update().seq();
  ledger_.Add(origin, frame->update().seq(), frame->update().checksum_delta());  // verified
  counters_.set_updates_applied(counters_.updates_applied() + 1);
  if (options_.on_accept) options_.on_accept(origin, frame->update());
  const std::string codec = CodecLabel(frame->update().codec());
  ++(*counters_.mutable_updates_received())[codec];
  (*counters_.mutable_update_bytes_received())[codec] += frame->update().ByteSizeLong();
  received_.updates.push_back(std::move(decoded));
  received_.accepted_at.push_back(Clock::now());
  if (TreeOverlay()) ForwardInTree(origin, frame->update().seq(), frame);
  log_.Add(origin, std::move(frame), Clock::now());
}

absl::Status GossipNode::Publish(const v1::Update& update, const codec::DecodedUpdate& decoded) {
  // The copy that goes out, its checksum contribution and its signature are
  // made before the lock: the node thread does not wait on them.
  auto frame = std::make_shared<v1::GossipFrame>();
  *frame->mutable_update() = update;
  const uint64_t contribution = codec::ChecksumContribution(checksum_, decoded);
  frame->mutable_update()->set_checksum_delta(contribution);
  if (signer_) signer_->Sign(frame->mutable_update());
  {
    absl::MutexLock l(&mu_);
    if (update.seq() != last_published_ + 1) {
      return absl::InternalError(
          absl::StrCat("published seq ", update.seq(), " after ", last_published_));
    }
    absl::Status s = codec::ApplyDecoded(decoded, &mirror_);
    if (!s.ok()) return s;
    last_published_ = update.seq();
    applied_[self_] = update.seq();
    ledger_.Add(self_, update.seq(), contribution);
    log_.Add(self_, frame, Clock::now());
    if (TreeOverlay()) {
      ForwardInTree(self_, update.seq(), frame);
    } else {
      for (auto& [id, m] : members_) PushTo(m, self_, update.seq(), frame);
    }
    changed_.SignalAll();
  }
  return absl::OkStatus();
}

void GossipNode::SendCounted(Link& link, std::shared_ptr<const v1::GossipFrame> frame) {
  const size_t bytes = frame->ByteSizeLong();
  if (link.Send(std::move(frame), SIZE_MAX)) counters_.set_bytes_sent(counters_.bytes_sent() + bytes);
}

bool GossipNode::SendTo(Member& m, std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap) {
  if (!m.link) return false;
  const size_t bytes = frame->ByteSizeLong();
  if (frame->has_heartbeat()) {
    if (!m.link->SendUrgent(std::move(frame), byte_cap)) return false;
    counters_.set_bytes_sent(counters_.bytes_sent() + bytes);
    return true;
  }
  if (!frame->has_update()) {
    if (!m.link->Send(std::move(frame), byte_cap)) return false;
    counters_.set_bytes_sent(counters_.bytes_sent() + bytes);
    return true;
  }
  const bool big = bytes >= options_.lane_min_bytes;
  if (big && options_.lanes > 0) m.wants_lanes = true;
  uint32_t lane = 0;
  if (big && !m.out_lanes.empty()) {  // small ones stay on the stream: no queue is read
    std::vector<std::optional<size_t>> queued(m.out_lanes.rbegin()->first + 1);
    queued[0] = m.link->QueuedBytes();
    for (const auto& [index, l] : m.out_lanes) {
      if (l.up) queued[index] = l.link->QueuedBytes();
    }
    lane = PickLane(bytes, options_.lane_min_bytes, queued, counters_.update_frames_sent());
  }
  Link& link = lane == 0 ? *m.link : *m.out_lanes[lane].link;
  if (!link.Send(frame, byte_cap)) return false;
  counters_.set_bytes_sent(counters_.bytes_sent() + bytes);
  counters_.set_update_frames_sent(counters_.update_frames_sent() + 1);
  // As the peer counts: updates only, per link.
  if (lane == 0) {
    ++m.frames_sent;
  } else {
    ++m.out_lanes[lane].frames;
    counters_.set_lane_update_frames_sent(counters_.lane_update_frames_sent() + 1);
  }
  return true;
}

void GossipNode::ResetStream(Member& m) {
  m.pushed.clear();
  m.pushed_frame.clear();
  m.frames_sent = 0;
  m.frames_received = 0;
  m.heartbeats_sent = 0;
}

bool GossipNode::SendUpdate(Member& m, const OriginKey& origin, uint64_t seq,
                            const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!SendTo(m, frame, options_.send_queue_byte_cap)) return false;
  m.pushed[origin] = seq;
  std::vector<uint64_t>& frontier = m.pushed_frame[origin];
  frontier.assign(m.out_lanes.empty() ? 1 : m.out_lanes.rbegin()->first + 1, 0);
  frontier[0] = m.frames_sent;
  for (const auto& [index, lane] : m.out_lanes) frontier[index] = lane.frames;
  uint64_t& ever = m.ever_sent[origin];
  ever = std::max(ever, seq);
  return true;
}

void GossipNode::PushTo(Member& m, const OriginKey& origin, uint64_t seq,
                        const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!m.link || m.state != MemberState::kAlive) return;
  // In order per origin: behind peers are served by anti-entropy.
  if (std::max(SeqOf(m.pushed, origin), SeqOf(m.applied, origin)) != seq - 1) return;
  if (!SendUpdate(m, origin, seq, frame)) counters_.set_queue_drops(counters_.queue_drops() + 1);
}

void GossipNode::RebuildRing() {
  if (!TreeOverlay()) return;
  std::vector<std::string> ids = {self_.node_id};
  for (const auto& [id, m] : members_) {
    if (m.state == MemberState::kAlive) ids.push_back(id);
  }
  ring_ = Ring(std::move(ids));
}

bool GossipNode::OriginAlive(const OriginKey& origin) const {
  if (origin == self_) return true;
  auto m = members_.find(origin.node_id);
  return m != members_.end() && m->second.incarnation == origin.incarnation &&
         m->second.state == MemberState::kAlive;
}

void GossipNode::ForwardInTree(const OriginKey& origin, uint64_t seq,
                               const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!OriginAlive(origin)) return;
  for (const std::string& child : ring_.Children(origin.node_id, self_.node_id)) {
    auto m = members_.find(child);
    if (m != members_.end()) PushTo(m->second, origin, seq, frame);
  }
}

bool GossipNode::HeartbeatDue(const Member& m) const {
  if (!TreeOverlay() || ring_.Neighbours(self_.node_id, m.node_id)) return true;
  const int64_t every = std::clamp<int64_t>(
      options_.failure_timeout / (4 * options_.heartbeat_interval), 1, 10);
  return ticks_ % static_cast<uint64_t>(every) == 0;
}

void GossipNode::LearnCertificates(const Member* from, const std::vector<std::string>& pems) {
  auto news = std::make_shared<v1::GossipFrame>();
  for (const std::string& pem : pems) {
    if (pem.empty() || pem.size() > 16384) continue;
    const bool known = certificates_->Has(pem);
    absl::StatusOr<std::string> id = certificates_->Add(pem);
    if (!id.ok()) {
      counters_.set_signature_errors(counters_.signature_errors() + 1);
      Log(absl::StrCat("ignored a certificate from ", from ? from->node_id : "?", ": ",
                       id.status().message()));
      continue;
    }
    if (!known) news->mutable_certificates()->add_pem(pem);
  }
  if (news->certificates().pem_size() == 0) return;
  for (auto& [id, m] : members_) {
    if (&m != from && m.link) SendTo(m, news, SIZE_MAX);
  }
}

void GossipNode::HandleHeartbeat(Member& m, const v1::Heartbeat& hb, Clock::time_point now) {
  m.applied = FromProto(hb.applied());
  m.training_done = hb.training_done();
  m.settled = hb.settled();
  m.weight_hash = hb.weight_hash().substr(0, 64);
  CheckSettledHash(m);
  if (hb.has_checked()) {
    m.pending_check = Member::Check{FromProto(hb.checked()), hb.checked_checksum()};
    ComparePeerCheck(m);
  }
  // Lost on this stream: it processed the frame that carried what we pushed
  // and still lacks some of it. Serve again from what it has.
  for (auto& [origin, seq] : m.pushed) {
    const uint64_t theirs = SeqOf(m.applied, origin);
    auto frame = m.pushed_frame.find(origin);
    if (theirs < seq && frame != m.pushed_frame.end() &&
        ProcessedThrough(frame->second, hb.frames_received(), hb.lane_frames_received())) {
      seq = theirs;
      m.pushed_frame.erase(frame);
    }
  }
  // No list: this heartbeat is one of those between two that carry it.
  if (hb.members_size() > 0) m.hears.clear();
  for (const v1::Member& other : hb.members()) {
    const std::string& id = other.node_id();
    if (id == self_.node_id || !ValidNodeId(id) || other.address().empty() ||
        other.address().size() > 255) {
      continue;
    }
    if (other.heard() && m.hears.size() < options_.max_members) {
      m.hears.insert(OriginKey{id, other.incarnation()});
    }
    if (!members_.count(id) && members_.size() >= options_.max_members) {
      counters_.set_members_refused(counters_.members_refused() + 1);
      continue;
    }
    Member& known = members_[id];
    if (known.node_id.empty()) {
      known.node_id = id;
      known.first_known = now;
      Log(absl::StrCat("learned of peer ", id, " at ", other.address().substr(0, 64), " from ",
                       m.node_id));
      MoveMember(known, other.address(), now);
    } else if (known.incarnation == 0 && !known.link && other.heard()) {
      // Never reached: where a member that hears it now says it is (a
      // restarted pod has a new IP; a member that does not hear it may
      // know an old one, and two such lists must not flip the address
      // back and forth). One address per member: a list naming many
      // addresses for one id leaves the last, not a dial target for each.
      MoveMember(known, other.address(), now);
    }
    // A member we reached said where it listens in its own Hello: what
    // others say of it does not change that.
  }
  AntiEntropy(m, now);
}

void GossipNode::AntiEntropy(Member& m, Clock::time_point now) {
  if (!m.link || m.state != MemberState::kAlive) return;
  // Every origin we applied, not only those our log still holds: a member
  // behind on one whose messages all left the log (it was dead when they
  // did) must be told to re-join, or it would never catch up.
  static const MessageLog::Entries kNothingRetained;
  for (const auto& [origin, ours] : applied_) {
    const MessageLog::Entries* retained = log_.Find(origin);
    const MessageLog::Entries& entries = retained != nullptr ? *retained : kNothingRetained;
    const RepairPlan plan =
        PlanRepair(ours, SeqOf(m.applied, origin), SeqOf(m.pushed, origin),
                   entries.empty() ? ours + 1 : entries.begin()->first,
                   m.resync_told.count(origin) > 0);
    if (plan.kind == RepairPlan::kResync) {
      // A live origin that m hears serves m itself (its own log decides
      // whether m must re-join): from us, a joiner whose cut is later than
      // m's, it would be a spurious snapshot.
      if (origin != self_ && OriginAlive(origin) && m.hears.count(origin) > 0) continue;
      auto frame = std::make_shared<v1::GossipFrame>();
      frame->mutable_resync()->mutable_origin()->set_node_id(origin.node_id);
      frame->mutable_resync()->mutable_origin()->set_incarnation(origin.incarnation);
      frame->mutable_resync()->set_first_retained_seq(plan.first);
      SendTo(m, frame, SIZE_MAX);
      m.resync_told.insert(origin);
      continue;
    }
    if (plan.kind != RepairPlan::kSend) continue;
    // (Our own count as alive; the relay rules do not ask for them.)
    const bool origin_alive = OriginAlive(origin);
    const bool member_hears_origin = m.hears.count(origin) > 0;
    const bool tree_child = TreeOverlay() && origin_alive &&
                            ring_.IsChild(origin.node_id, self_.node_id, m.node_id);
    for (auto it = entries.find(plan.first); it != entries.end() && it->first <= plan.last; ++it) {
      if (LeastQueued(m) > options_.send_queue_byte_cap / 2) return;
      const Clock::duration age = now - it->second.added, heard_for = now - m.alive_since;
      const bool may =
          TreeOverlay()
              ? MayRelayInTree(tree_child, origin == self_, origin_alive, member_hears_origin, age,
                               heard_for, options_.repair_timeout, options_.failure_timeout)
              : MayRelay(origin == self_, origin_alive, member_hears_origin, age, heard_for,
                         options_.repair_timeout, options_.failure_timeout);
      if (!may) break;
      const bool resend = it->first <= SeqOf(m.ever_sent, origin);
      if (!SendUpdate(m, origin, it->first, it->second.frame)) break;
      counters_.set_repairs_sent(counters_.repairs_sent() + 1);
      if (resend) counters_.set_repairs_resent(counters_.repairs_resent() + 1);
    }
  }
}

std::shared_ptr<const v1::GossipFrame> GossipNode::MakeHeartbeat() {
  auto frame = std::make_shared<v1::GossipFrame>();
  v1::Heartbeat* hb = frame->mutable_heartbeat();
  ToProto(applied_, hb->mutable_applied());
  hb->set_local_steps(local_steps_);
  hb->set_training_done(training_done_);
  if (settled_ && SameVersions(settled_at_, applied_)) {
    hb->set_settled(true);
    hb->set_weight_hash(settled_hash_);
  }
  if (check_to_announce_) {
    ToProto(check_to_announce_->at, hb->mutable_checked());
    hb->set_checked_checksum(check_to_announce_->checksum);
    check_to_announce_.reset();
  }
  return frame;
}

void GossipNode::AddMemberList(v1::Heartbeat* hb) const {
  v1::Member* me = hb->add_members();
  me->set_node_id(self_.node_id);
  me->set_incarnation(self_.incarnation);
  me->set_address(options_.listen_address);
  for (const auto& [id, m] : members_) {
    if (m.state == MemberState::kLeft || m.address.empty()) continue;
    v1::Member* other = hb->add_members();
    other->set_node_id(id);
    other->set_incarnation(m.incarnation);
    other->set_address(m.address);
    other->set_heard(m.state == MemberState::kAlive);
  }
}

std::shared_ptr<const v1::GossipFrame> GossipNode::HeartbeatFor(Member& m,
                                                                const v1::GossipFrame& base) {
  auto frame = std::make_shared<v1::GossipFrame>(base);
  frame->mutable_heartbeat()->set_frames_received(m.frames_received);
  if (!m.in_lanes.empty()) {
    for (uint32_t i = 1; i <= m.in_lanes.rbegin()->first; ++i) {
      auto lane = m.in_lanes.find(i);
      frame->mutable_heartbeat()->add_lane_frames_received(
          lane == m.in_lanes.end() ? 0 : lane->second.frames);
    }
  }
  if (m.heartbeats_sent++ % std::max(1, options_.member_list_every) == 0) {
    AddMemberList(frame->mutable_heartbeat());
  }
  return frame;
}

void GossipNode::DropLink(Member& m) {
  // Abort, not Close: a dead or departed peer may never finish the write in
  // flight, and Close would wait on it forever.
  if (m.link) m.link->Abort();
  m.link.reset();
  ResetStream(m);
  DropLanes(m);
  m.resync_told.clear();
}

void GossipNode::Tick(Clock::time_point now) {
  ++ticks_;
  UpdateSettled();
  auto heartbeat = MakeHeartbeat();
  // Frames that arrived but wait in the inbox count as heard.
  const std::map<const Link*, Clock::time_point> arrivals = inbox_.LastArrivals();
  for (auto& [id, m] : members_) {
    if (!m.link) continue;
    auto arrived = arrivals.find(m.link.get());
    if (arrived != arrivals.end()) m.last_heard = std::max(m.last_heard, arrived->second);
  }
  for (auto& [id, m] : members_) {
    if (std::optional<std::string> dead = SilentTooLong(m, now, options_.failure_timeout)) {
      Log(*dead);
      counters_.set_members_failed(counters_.members_failed() + 1);
      m.state = MemberState::kDead;
      DropLink(m);
      RebuildRing();
    }
    if (m.link && HeartbeatDue(m)) {
      SendTo(m, HeartbeatFor(m, *heartbeat), 2 * options_.send_queue_byte_cap);
    }
    if (m.link) AntiEntropy(m, now);
    if (m.link) DialLanes(m, now);
    ComparePeerCheck(m);
  }
  CollectGarbage(now);
  CloseSilentStreams(now);
  DialDue(now);
}

void GossipNode::CollectGarbage(Clock::time_point now) {
  // Until every seed had its chance to connect we do not know who needs what.
  if (now - started_ < options_.failure_timeout) return;
  for (const auto& [id, m] : members_) {
    if (m.state == MemberState::kConnecting) return;
  }
  // Per origin, the least any live member (and we) applied. Our own
  // messages stay while a dead member lacks them too: it may come back (a
  // member marked dead under load, a healed partition), we are the one node
  // sure to hold them, and a re-join of ours from a snapshot without them
  // needs them (InstallSnapshot). The byte cap still bounds the log.
  VersionMap floor;
  for (const auto& [origin, entries] : log_.origins()) {
    uint64_t least = SeqOf(applied_, origin);
    for (const auto& [id, m] : members_) {
      const bool counts = m.state == MemberState::kAlive ||
                          (origin == self_ && m.state == MemberState::kDead);
      if (counts) least = std::min(least, SeqOf(m.applied, origin));
    }
    floor[origin] = least;
  }
  log_.Collect(floor, now);
}

void GossipNode::DialDue(Clock::time_point now) {
  if (!dialer_) return;
  for (DialSchedule::Expired& e : dial_.TakeExpired(now)) {
    // Every dial has a deadline (two failure timeouts: a handshake needs a
    // whole round trip, a heartbeat only half of one).
    Log(absl::StrCat("dial to ", e.address, " got no handshake in ",
                     absl::StrFormat("%.1f", std::chrono::duration<double>(e.waited).count()),
                     " s: abandoned, will dial again"));
    pending_.Remove(e.link);
    e.link->Abort();
  }
  auto connected = [this](const std::string& address) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (const auto& [id, m] : members_) {  // the caller holds mu_
      if (m.address == address && (m.link || m.state == MemberState::kLeft)) return true;
    }
    return false;
  };
  for (const std::string& address : dial_.Due(now, connected)) {
    std::shared_ptr<Link> link = dialer_(address);
    if (!link) continue;
    dial_.Dialed(address, link, now);
    AwaitHello(link, now);
    SendCounted(*link, MakeHello());
  }
}

// --- training thread --------------------------------------------------------

Received GossipNode::TakeReceived(bool with_cut) {
  absl::MutexLock l(&mu_);
  Received out = std::move(received_);
  received_ = Received{};
  out.checksum = ledger_.total();
  if (with_cut) out.cut = applied_;
  return out;
}

void GossipNode::RecordReplicaCheck(const VersionMap& at, uint64_t measured, uint64_t expected,
                                    double ms) {
  absl::MutexLock l(&mu_);
  counters_.set_replica_checks(counters_.replica_checks() + 1);
  last_check_ms_ = ms;
  if (measured == expected) {
    check_to_announce_ = Member::Check{at, measured};
    return;
  }
  counters_.set_replica_check_failures(counters_.replica_check_failures() + 1);
  Log(absl::StrCat("REPLICA CHECK FAILED: the training replica's checksum is ",
                   codec::ChecksumHex(measured), " but the messages it applied give ",
                   codec::ChecksumHex(expected), " at ", VersionJson(at),
                   " (memory corruption, a faulty device, or a bug in apply)"));
}

std::optional<std::string> GossipNode::RepairSourceLocked(const std::string& avoid) {
  const Member* best = nullptr;
  const uint64_t published = last_published_;  // lambdas are not seen to hold mu_
  auto rank = [&](const Member& m) {
    uint64_t total = 0;
    for (const auto& [origin, seq] : m.applied) total += seq;
    return std::make_tuple(SeqOf(m.applied, self_) >= published,
                           m.checks_diverged == 0 && m.checks_agreed > 0, total);
  };
  auto rank_avoiding = [&](const Member& m) { return std::make_pair(m.address != avoid, rank(m)); };
  for (const auto& [id, m] : members_) {
    if (m.state != MemberState::kAlive || m.address.empty()) continue;
    if (best == nullptr || rank_avoiding(m) > rank_avoiding(*best)) best = &m;
  }
  if (best == nullptr) return std::nullopt;
  return best->address;
}

std::optional<std::string> GossipNode::RepairSource() {
  absl::MutexLock l(&mu_);
  return RepairSourceLocked();
}

void GossipNode::CountReplicaRepair() {
  absl::MutexLock l(&mu_);
  counters_.set_replica_repairs(counters_.replica_repairs() + 1);
}

void GossipNode::ComparePeerCheck(Member& m) {
  if (!m.pending_check || !ledger_.Passed(m.pending_check->at)) return;  // not there yet
  const Member::Check check = *std::move(m.pending_check);
  m.pending_check.reset();
  const std::optional<uint64_t> ours = ledger_.At(check.at);
  if (!ours) return;  // behind the history we keep (or our snapshot's cut): not comparable
  if (*ours == check.checksum) {
    ++m.checks_agreed;
    counters_.set_peer_checks_agreed(counters_.peer_checks_agreed() + 1);
    return;
  }
  ++m.checks_diverged;
  counters_.set_divergences(counters_.divergences() + 1);
  Log(absl::StrCat("DIVERGENCE: ", m.node_id, "'s replica checked ",
                   codec::ChecksumHex(check.checksum), " at ", VersionJson(check.at),
                   " but the messages this node applied give ", codec::ChecksumHex(*ours),
                   " there: the two applied different messages under the same ids"));
}

absl::Status GossipNode::Health() {
  absl::MutexLock l(&mu_);
  return fatal_;
}

uint64_t GossipNode::MaxPeerLagLocked() {
  uint64_t lag = 0;
  for (const auto& [id, m] : members_) {
    if (m.state != MemberState::kAlive) continue;
    const uint64_t theirs = SeqOf(m.applied, self_);
    if (last_published_ > theirs) lag = std::max(lag, last_published_ - theirs);
  }
  return lag;
}

bool GossipNode::WaitWhileLagging(uint64_t max_lag, Clock::time_point deadline) {
  absl::MutexLock l(&mu_);
  while (MaxPeerLagLocked() > max_lag) {
    const auto now = Clock::now();
    if (now >= deadline || stopping_) return false;
    changed_.WaitWithTimeout(&mu_, absl::Milliseconds(20));
  }
  return true;
}

size_t GossipNode::OwnBacklogBytesLocked() {
  bool any_alive = false;
  uint64_t least = last_published_;
  for (const auto& [id, m] : members_) {
    if (m.state != MemberState::kAlive) continue;
    any_alive = true;
    least = std::min(least, SeqOf(m.applied, self_));
  }
  const MessageLog::Entries* own = log_.Find(self_);
  if (!any_alive || own == nullptr) return 0;
  size_t bytes = 0;
  for (auto it = own->upper_bound(least); it != own->end(); ++it) bytes += it->second.bytes;
  return bytes;
}

size_t GossipNode::MaxBacklogBytesLocked() {
  if (options_.max_backlog_bytes > 0) return options_.max_backlog_bytes;
  size_t members = 1;
  for (const auto& [id, m] : members_) members += m.state == MemberState::kAlive;
  return options_.log_byte_cap / (2 * members);
}

size_t GossipNode::OwnBacklogBytes() {
  absl::MutexLock l(&mu_);
  return OwnBacklogBytesLocked();
}

bool GossipNode::WaitWhileBacklogged(Clock::time_point deadline) {
  absl::MutexLock l(&mu_);
  const auto start = Clock::now();
  bool go_on = true;
  while (OwnBacklogBytesLocked() > MaxBacklogBytesLocked()) {
    if (Clock::now() >= deadline || stopping_) {
      go_on = false;
      break;
    }
    changed_.WaitWithTimeout(&mu_, absl::Milliseconds(20));
  }
  counters_.set_backpressure_ms(
      counters_.backpressure_ms() +
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));
  return go_on;
}

void GossipNode::SetTrainingDone(uint64_t local_steps) {
  absl::MutexLock l(&mu_);
  training_done_ = true;
  local_steps_ = local_steps;
}

int GossipNode::TrainingMembers() {
  absl::MutexLock l(&mu_);
  int members = training_done_ ? 0 : 1;
  for (const auto& [id, m] : members_) {
    if (m.state == MemberState::kAlive && !m.training_done) ++members;
  }
  return members;
}

void GossipNode::SetLocalSteps(uint64_t steps) {
  absl::MutexLock l(&mu_);
  local_steps_ = steps;
}

LocalQuiescence GossipNode::LocalQuiescenceLocked() {
  LocalQuiescence q;
  q.node_id = self_.node_id;
  q.training_done = training_done_;
  q.applying = !received_.updates.empty() || received_.replace_weights.has_value();
  if (!reached_any_) {
    for (const std::string& seed : options_.seeds) q.unreached |= !dial_.IsSelf(seed);
  }
  const auto now = Clock::now();
  for (auto it = joiners_.begin(); it != joiners_.end();) {
    auto m = members_.find(it->first);
    const bool arrived = m != members_.end() && m->second.incarnation == it->second.incarnation &&
                         m->second.state != MemberState::kConnecting;
    if (arrived || now - it->second.last_request > options_.failure_timeout) {
      it = joiners_.erase(it);
    } else {
      q.joining.push_back(it->first);
      ++it;
    }
  }
  q.applied = applied_;
  q.settled = settled_;
  q.settled_at = settled_at_;
  q.settled_hash = settled_hash_;
  return q;
}

void GossipNode::NoteJoiner(const std::string& node_id, uint64_t incarnation) {
  absl::MutexLock l(&mu_);
  // Only ids a Hello could carry: they end up in logs, JSON and metric labels.
  if (!ValidNodeId(node_id) || node_id == self_.node_id) return;
  auto it = joiners_.find(node_id);
  if (it == joiners_.end()) {
    if (joiners_.size() >= options_.max_members) return;
    Log(absl::StrCat(node_id, " is joining (it asked for a snapshot)"));
    it = joiners_.emplace(node_id, Joiner{}).first;
  }
  it->second.incarnation = incarnation;
  it->second.last_request = Clock::now();
  changed_.SignalAll();
}

bool GossipNode::SettledLocked(std::string* why) {
  return Settled(LocalQuiescenceLocked(), members_, why);
}

void GossipNode::UpdateSettled() {
  std::string why;
  const bool settled = SettledLocked(&why);
  if (settled && (!settled_ || !SameVersions(settled_at_, applied_))) {
    // SHA-256 of the whole replica, on this thread: only when this node
    // settles at a new vector, i.e. a few times at the end of a run.
    settled_hash_ = mirror_.WeightHash();
    settled_at_ = applied_;
  }
  settled_ = settled;
  if (settled_) {
    for (const auto& [id, m] : members_) CheckSettledHash(m);
  }
}

void GossipNode::CheckSettledHash(const Member& m) {
  // Per heartbeat received: nothing to compare (and no state to copy) until
  // both sides have settled, i.e. during all of training.
  if (!fatal_.ok() || !settled_ || !m.settled) return;
  if (std::optional<std::string> line = Divergence(LocalQuiescenceLocked(), m)) {
    fatal_ = absl::DataLossError(*line);
    Log(*line);
  }
}

bool GossipNode::QuiescentLocked(std::string* why) {
  return Quiescent(LocalQuiescenceLocked(), members_, why);
}

absl::Status GossipNode::WaitQuiescent(Clock::time_point deadline,
                                       const std::function<absl::Status(Received&)>& drain) {
  std::string why;
  for (;;) {
    Received got;
    {
      absl::MutexLock l(&mu_);
      if (!fatal_.ok()) return fatal_;
      if (QuiescentLocked(&why)) return absl::OkStatus();
      got = std::move(received_);
      received_ = Received{};
      if (!got.replace_weights && got.updates.empty()) {
        if (Clock::now() >= deadline) {
          return absl::DeadlineExceededError(
              absl::StrCat("cluster not quiescent before the deadline: ", why));
        }
        changed_.WaitWithTimeout(&mu_, absl::Milliseconds(50));
        continue;
      }
    }
    absl::Status s = drain(got);
    if (!s.ok()) return s;
  }
}

std::optional<std::string> GossipNode::ResyncSource() {
  absl::MutexLock l(&mu_);
  return resync_source_;
}

bool GossipNode::ResyncFailed(const std::string& source, bool need_our_messages) {
  absl::MutexLock l(&mu_);
  if (resync_source_ != source) return false;
  std::optional<std::string> other = RepairSourceLocked(source);
  if (!other || *other == source) return false;
  if (need_our_messages) {
    const uint64_t published = last_published_;  // lambdas are not seen to hold mu_
    const auto holder = std::find_if(members_.begin(), members_.end(), [&](const auto& entry) {
      return entry.second.address == *other && SeqOf(entry.second.applied, self_) >= published;
    });
    if (holder == members_.end()) return false;
  }
  resync_source_ = other;
  return true;
}

absl::Status GossipNode::InstallSnapshot(std::span<const int64_t> weights,
                                         const VersionMap& applied, uint64_t checksum,
                                         const std::string& source) {
  // Measured before the lock: O(param_count).
  const uint64_t measured = checksum_.Of(weights);
  absl::MutexLock l(&mu_);
  if (measured != checksum) {
    counters_.set_divergences(counters_.divergences() + 1);
    return absl::DataLossError(absl::StrCat("the snapshot from ", source, " has checksum ",
                                            codec::ChecksumHex(measured), " but its messages give ",
                                            codec::ChecksumHex(checksum), ": not installed"));
  }
  // What can refuse the snapshot is checked before the mirror changes, so
  // that a refused one leaves mirror, ledger and versions as they were.
  if (const uint64_t own = OwnMessagesBeyond(applied); own < last_published_) {
    return absl::FailedPreconditionError(
        absl::StrCat("the snapshot from ", source, " lacks our own messages after seq ", own,
                     " and our log no longer holds them"));
  }
  // Kept until the replay succeeded (a logged message that no longer
  // decodes would be a bug, but must not leave a half-installed mirror).
  const std::vector<int64_t> previous(mirror_.quanta().begin(), mirror_.quanta().end());
  absl::Status s = mirror_.Load(weights);
  if (!s.ok()) return s;
  ChecksumLedger ledger = ledger_;
  ledger_.Reset(checksum, applied);
  VersionMap now_applied = applied;
  // Replay what our log holds beyond the snapshot (our own messages above
  // all: the snapshot's source may not have them yet).
  for (const auto& [origin, entries] : log_.origins()) {
    uint64_t next = SeqOf(now_applied, origin) + 1;
    for (auto it = entries.find(next); it != entries.end() && it->first == next; ++it, ++next) {
      codec::DecodedUpdate decoded;
      if (!codec::DecodeUpdate(it->second.frame->update(), &decoded).ok() ||
          !codec::ApplyDecoded(decoded, &mirror_).ok()) {
        ledger_ = std::move(ledger);
        (void)mirror_.Load(previous);
        return absl::DataLossError(absl::StrCat("logged message ", origin.ToString(), " seq ",
                                                it->first, " cannot be replayed"));
      }
      now_applied[origin] = it->first;
      ledger_.Add(origin, it->first, it->second.frame->update().checksum_delta());
    }
  }
  applied_ = std::move(now_applied);
  received_.updates.clear();
  received_.accepted_at.clear();
  received_.replace_weights.emplace(mirror_.quanta().begin(), mirror_.quanta().end());
  for (const OriginKey& origin : early_.Origins()) AcceptWaiting(origin);
  for (auto& [id, m] : members_) {
    m.pushed.clear();
    m.pushed_frame.clear();
  }
  resync_source_.reset();
  counters_.set_snapshots_loaded(counters_.snapshots_loaded() + 1);
  Log(absl::StrCat("installed a snapshot from ", source, ": ", VersionJson(applied_)));
  changed_.SignalAll();
  return absl::OkStatus();
}

uint64_t GossipNode::OwnMessagesBeyond(const VersionMap& applied) const {
  uint64_t seq = SeqOf(applied, self_);
  const auto own = log_.origins().find(self_);
  if (own == log_.origins().end()) return seq;
  for (auto it = own->second.find(seq + 1); it != own->second.end() && it->first == seq + 1; ++it) {
    ++seq;
  }
  return seq;
}

// --- service ----------------------------------------------------------------

GossipNode::Snapshot GossipNode::TakeSnapshot(bool with_weights) {
  absl::MutexLock l(&mu_);
  Snapshot out{applied_, ledger_.total(), {}};
  if (with_weights) out.weights.assign(mirror_.quanta().begin(), mirror_.quanta().end());
  return out;
}

bool GossipNode::CheckSnapshotServed(const Snapshot& snapshot, uint64_t measured) {
  if (measured == snapshot.checksum) return true;
  absl::MutexLock l(&mu_);
  counters_.set_replica_check_failures(counters_.replica_check_failures() + 1);
  Log(absl::StrCat("REPLICA CHECK FAILED: this node's mirror has checksum ",
                   codec::ChecksumHex(measured), " but its messages give ",
                   codec::ChecksumHex(snapshot.checksum), " at ", VersionJson(snapshot.applied),
                   ": snapshot refused; re-joining from a peer"));
  if (!resync_source_) resync_source_ = RepairSourceLocked();
  return false;
}

void GossipNode::Count(int field_number, uint64_t n) {
  const google::protobuf::FieldDescriptor* field =
      Counters::descriptor()->FindFieldByNumber(field_number);
  // A caller's mistake, not the network's: the field numbers are constants.
  if (field == nullptr || field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT64 ||
      field->is_repeated()) {
    std::abort();
  }
  absl::MutexLock l(&mu_);
  const google::protobuf::Reflection* reflection = counters_.GetReflection();
  reflection->SetUInt64(&counters_, field, reflection->GetUInt64(counters_, field) + n);
}

VersionMap GossipNode::Applied() {
  absl::MutexLock l(&mu_);
  return applied_;
}

std::string GossipNode::MirrorHash() {
  absl::MutexLock l(&mu_);
  return mirror_.WeightHash();
}

GossipNode::Counters GossipNode::counters() {
  absl::MutexLock l(&mu_);
  Counters c = counters_;
  c.set_inbox_pauses(inbox_.pauses());  // mu_ before the inbox's lock
  return c;
}

std::chrono::milliseconds GossipNode::LoopAge() const {
  const Clock::time_point last{Clock::duration(last_loop_ns_.load())};
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last);
}

uint64_t GossipNode::MessagesBehind() {
  absl::MutexLock l(&mu_);
  uint64_t most = 0;
  for (const auto& [id, m] : members_) {
    if (m.state != MemberState::kAlive) continue;
    uint64_t behind = 0;
    for (const auto& [origin, seq] : m.applied) {
      const uint64_t ours = SeqOf(applied_, origin);
      if (seq > ours) behind += seq - ours;
    }
    most = std::max(most, behind);
  }
  return most;
}

void GossipNode::FillCounters(v1::NodeStatus* out) {
  *out->mutable_counters() = counters_;
  out->mutable_counters()->set_inbox_pauses(inbox_.pauses());  // mu_ before the inbox's lock
  out->set_checksum(ledger_.total());
  out->set_last_check_ms(last_check_ms_);
  out->set_early_held(early_.size());
  out->set_early_bytes(early_.bytes());
  out->set_dial_targets(dial_.targets());
  out->set_inbox_bytes(inbox_.bytes());
}

void GossipNode::FillStatus(v1::NodeStatus* out, bool with_weight_hash) {
  if (with_weight_hash) {
    // Computed on a copy, outside the lock: SHA-256 of the whole replica
    // must not stall the node thread (status is polled).
    std::vector<int64_t> weights;
    {
      absl::MutexLock l(&mu_);
      weights.assign(mirror_.quanta().begin(), mirror_.quanta().end());
    }
    out->set_weight_hash(codec::WeightHashOf(weights));
  }
  absl::MutexLock l(&mu_);
  const auto now = Clock::now();
  out->set_node_id(self_.node_id);
  out->set_incarnation(self_.incarnation);
  *out->mutable_fingerprint() = options_.fingerprint;
  out->set_local_steps(local_steps_);
  ToProto(applied_, out->mutable_applied());
  out->set_training_done(training_done_);
  out->set_joined(started_flag_.load());
  FillCounters(out);
  out->set_log_bytes(log_.bytes());
  out->set_log_messages(log_.messages());
  std::string why;
  out->set_quiescent(QuiescentLocked(&why));  // also drops joiners that arrived or expired
  for (const auto& [id, j] : joiners_) {
    if (members_.count(id) && members_.at(id).incarnation == j.incarnation) continue;
    v1::MemberStatus* ms = out->add_members();
    ms->set_node_id(id);
    ms->set_incarnation(j.incarnation);
    ms->set_state("joining");
    ms->set_last_heard_s(SecondsSince(j.last_request, now));
  }
  for (const auto& [id, m] : members_) {
    v1::MemberStatus* ms = out->add_members();
    ms->set_node_id(id);
    ms->set_incarnation(m.incarnation);
    ms->set_address(m.address);
    ms->set_state(MemberStateName(m.state));
    ms->set_lag(static_cast<int64_t>(last_published_) -
                static_cast<int64_t>(SeqOf(m.applied, self_)));
    ms->set_training_done(m.training_done);
    ms->set_last_heard_s(m.state == MemberState::kConnecting ? -1
                                                             : SecondsSince(m.last_heard, now));
    ms->set_checks_agreed(m.checks_agreed);
    ms->set_checks_diverged(m.checks_diverged);
    ms->set_lanes_out(static_cast<uint32_t>(std::count_if(
        m.out_lanes.begin(), m.out_lanes.end(), [](const auto& l) { return l.second.up; })));
    ms->set_lanes_in(static_cast<uint32_t>(m.in_lanes.size()));
    uint64_t queued = m.link ? m.link->QueuedBytes() : 0;
    for (const auto& [index, lane] : m.out_lanes) queued += lane.link->QueuedBytes();
    ms->set_queued_bytes(queued);
  }
}

}  // namespace reckon::server
