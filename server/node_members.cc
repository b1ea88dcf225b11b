// One part of GossipNode's methods (server/node.h; docs/architecture.md "The
// gossip node in parts"). The member table and handshakes: Hellos judged and
// answered, refusals, dials and their addresses, joiners, the tree's ring,
// certificates learned. Each runs on the thread and under the lock its
// declaration in node.h names.
#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "codec/codec.h"
#include "server/anti_entropy.h"
#include "server/lanes.h"
#include "server/membership.h"
#include "server/node.h"

namespace reckon::server {

void GossipNode::MoveMember(Member& m, const std::string& address, Clock::time_point now) {
  if (m.address == address) return;
  if (!m.address.empty()) {
    // Its old address is dialed no more (unless it is a seed): an old pod
    // IP would otherwise be redialed forever, and another process may
    // listen there by now.
    StopDialing(m.address);
  }
  m.address = address;
  if (!dial_.Learn(address, now)) {
    counters_.Add(Counters::kDialTargetsRefusedFieldNumber);
    Log(absl::StrCat("not dialing ", address.substr(0, 64), " for ", m.node_id, ": ",
                     dial_.targets(), " addresses known already"));
  }
}

void GossipNode::StopDialing(const std::string& address) {
  if (address.empty()) return;
  if (std::shared_ptr<Link> pending = dial_.Forget(address)) {
    members_.StopAwaiting(pending);
    pending->Abort();
  }
}

void GossipNode::AwaitHello(const std::shared_ptr<Link>& link, Clock::time_point now) {
  for (const std::shared_ptr<Link>& evicted : members_.AwaitHello(link, now)) {
    counters_.Add(Counters::kHandshakesEvictedFieldNumber);
    Log(absl::StrCat("closing ", evicted->Describe(), ": no Hello yet, and ",
                     options_.max_pending_handshakes, " streams wait for theirs"));
    evicted->Abort();
  }
}

void GossipNode::CloseSilentStreams(Clock::time_point now) {
  for (const std::shared_ptr<Link>& silent : members_.TakeSilent(now)) {
    counters_.Add(Counters::kHelloTimeoutsFieldNumber);
    Log(absl::StrCat("closing ", silent->Describe(), ": no Hello within ",
                     options_.hello_timeout.count(), " ms"));
    silent->Abort();
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
  if (theirs.model() != ours.model()) {
    // A framework's layout: the tensor that differs, by name.
    if (std::optional<std::string> tensor = DescribeModelDifference(theirs.model(), ours.model())) {
      return absl::FailedPreconditionError(
          absl::StrCat("cluster fingerprint mismatch: the model differs: ", *tensor, " (there: '",
                       peer.substr(0, 64), "', here: '", self_.node_id, "')"));
    }
    return differs("model", theirs.model().substr(0, 96), ours.model());
  }
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
  if (theirs.data() != ours.data()) {
    return differs("the training data", absl::StrCat("'", theirs.data().substr(0, 96), "'"),
                   absl::StrCat("'", ours.data(), "'"));
  }
  return CheckToken(token);
}

absl::Status GossipNode::CheckToken(const std::string& token) const {
  if (!options_.cluster_token.empty() && !TokenMatches(token, options_.cluster_token)) {
    return absl::PermissionDeniedError("cluster token does not match");
  }
  return absl::OkStatus();
}

std::vector<std::string> GossipNode::LiveMemberAddresses(const std::string& except) {
  absl::MutexLock l(&mu_);
  return members_.LiveAddresses(except);
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
  } else if (permanent) {
    RefusedByDialed(link, absl::StrCat("peer ", link->Describe(), " is not of this cluster: ",
                                       reason));
  }
  members_.StopAwaiting(link);
  link->Close();
}

void GossipNode::RefusedByDialed(const std::shared_ptr<Link>& link, const std::string& why) {
  counters_.Add(Counters::kDialsRefusedFieldNumber);
  const std::string address = dial_.Refused(link);
  Log(absl::StrCat(why.substr(0, 300), ": not dialing ", address.empty() ? "it" : address,
                   " again"));
  if (handshaken_once_ || address.empty()) return;
  const bool seed = std::find(options_.seeds.begin(), options_.seeds.end(), address) !=
                    options_.seeds.end();
  if (!seed) return;
  seeds_refused_.insert(address);
  for (const std::string& s : options_.seeds) {
    if (!dial_.IsSelf(s) && !seeds_refused_.count(s)) return;  // another seed may take us
  }
  if (fatal_.ok()) fatal_ = absl::FailedPreconditionError(why);
}

HelloVerdict GossipNode::Judge(const Link& link, const v1::Hello& hello) const {
  HelloContext context;
  context.fingerprint_and_token =
      CheckPeer(hello.fingerprint(), hello.cluster_token(), hello.self().node_id());
  context.require_identity = options_.require_peer_identity;
  context.peer_identity = link.PeerIdentity();
  context.link_dialed = link.dialed();
  context.now = Now();
  context.failure_timeout = options_.failure_timeout;
  return members_.Judge(hello, std::move(context));
}

void GossipNode::HandleHello(const std::shared_ptr<Link>& link, const v1::Hello& hello) {
  const auto now = Now();
  if (hello.lane() != 0) {
    HandleLaneHello(link, hello);
    return;
  }
  if (!members_.AwaitsHello(link)) return;  // a second Hello: ignore
  const std::string& id = hello.self().node_id();
  const HelloVerdict verdict = Judge(*link, hello);
  if (verdict.kind == HelloVerdict::kSelfDial) {
    // We dialed ourselves (our address is in the seed list): remember it.
    dial_.DialedSelf(link);
    members_.StopAwaiting(link);
    link->Close();
    return;
  }
  if (verdict.kind == HelloVerdict::kRefuse) {
    if (verdict.over_member_cap) {
      counters_.Add(Counters::kMembersRefusedFieldNumber);
    } else {
      counters_.Add(Counters::kPeersRefusedFieldNumber);
    }
    Refuse(link, id, verdict.reason, verdict.permanent);
    return;
  }
  const MemberTable::Admitted admitted = members_.Admit(link, hello, now);
  Member& m = *admitted.member;
  if (!admitted.gave_way.empty()) StopDialing(admitted.gave_way);
  if (admitted.restarted) {
    Log(absl::StrCat("peer ", id, " restarted as incarnation ", m.incarnation));
    if (m.links.connected()) DropLink(m);
  }
  dial_.Handshaken(link);  // before MoveMember, which may forget the address it was dialed at
  handshaken_once_ = true;
  if (!hello.listen_address().empty()) MoveMember(m, hello.listen_address(), now);
  if (!link->dialed()) SendCounted(*link, MakeHello());
  if (m.links.connected() && m.links.stream() != link) {
    // Two streams for one pair (both dialed at once): both ends keep the one
    // dialed by the smaller node id, so they agree without talking.
    if (KeepsStream(self_.node_id, id, link->dialed())) {
      DropLink(m);
    } else {
      link->Close();
      return;
    }
  }
  m.links.Attach(link, hello.lanes_accepted(), now);
  m.last_heard = now;
  if (signatures_ != nullptr) {
    // Its handshake certificate first, then everything we know goes to it
    // before any Update can: relayed messages are always verifiable.
    LearnCertificates(&m, {link->PeerCertificate()});
    auto frame = std::make_shared<v1::GossipFrame>();
    for (std::string& pem : signatures_->Certificates()) {
      frame->mutable_certificates()->add_pem(std::move(pem));
    }
    SendTo(m, frame, SIZE_MAX);
  }
  if (members_.MarkAlive(m, now)) {
    Log(absl::StrCat("peer ", id, " (incarnation ", m.incarnation,
                     ") connected: ", link->Describe()));
  }
  m.vouched = true;
  RebuildRing();
  reached_any_ = true;
  SendHeartbeat(m, MakeHeartbeats(/*tick=*/false), SIZE_MAX);
}

void GossipNode::DropLink(Member& m) {
  m.links.Drop();
  m.resync_told.clear();
}

void GossipNode::DialDue(Clock::time_point now) {
  if (!dialer_) return;
  for (DialSchedule::Expired& e : dial_.TakeExpired(now)) {
    // Every dial has a deadline (two failure timeouts: a handshake needs a
    // whole round trip, a heartbeat only half of one).
    Log(absl::StrCat("dial to ", e.address, " got no handshake in ",
                     absl::StrFormat("%.1f", std::chrono::duration<double>(e.waited).count()),
                     " s: abandoned, will dial again"));
    members_.StopAwaiting(e.link);
    e.link->Abort();
  }
  auto connected = [this](const std::string& address) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return members_.ConnectedOrLeftAt(address);  // the caller holds mu_
  };
  for (const std::string& address : dial_.Due(now, connected)) {
    std::shared_ptr<Link> link = dialer_(address);
    if (!link) continue;
    dial_.Dialed(address, link, now);
    AwaitHello(link, now);
    SendCounted(*link, MakeHello());
  }
  counters_.Set(Counters::kDialsDeferredFieldNumber, dial_.deferred());
}

void GossipNode::NoteJoiner(const std::string& node_id, uint64_t incarnation) {
  absl::MutexLock l(&mu_);
  // Only ids a Hello could carry: they end up in logs, JSON and metric labels.
  if (!ValidNodeId(node_id) || node_id == self_.node_id) return;
  const Joiners::Noted noted = joiners_.Note(node_id, incarnation, Now());
  if (noted == Joiners::Noted::kFull) return;
  if (noted == Joiners::Noted::kNew) {
    Log(absl::StrCat(node_id, " is joining (it asked for a snapshot)"));
  }
  changed_.SignalAll();
}

void GossipNode::RebuildRing() {
  if (!TreeOverlay()) return;
  std::vector<std::string> ids = {self_.node_id};
  for (std::string& id : members_.AliveIds()) ids.push_back(std::move(id));
  ring_ = Ring(std::move(ids));
}

bool GossipNode::OriginAlive(const OriginKey& origin) const {
  return origin == self_ || members_.IsAlive(origin);
}

bool GossipNode::OriginMayBeAlive(const OriginKey& origin, Clock::time_point now) const {
  if (OriginAlive(origin)) return true;
  const Member* m = members_.Find(origin.node_id);
  if (m != nullptr && m->incarnation == origin.incarnation &&
      (m->state() == MemberState::kDead || m->state() == MemberState::kLeft)) {
    return false;  // reached, then silent past the failure timeout, or gone
  }
  if (m != nullptr && m->incarnation != origin.incarnation) return false;  // it restarted
  // Not reached (yet): given a failure timeout since we began, or since we
  // learned of its member, before it is presumed gone.
  const Clock::time_point since = m != nullptr ? std::max(started_, m->first_known) : started_;
  return now - since < options_.failure_timeout;
}

void GossipNode::LearnCertificates(const Member* from, const std::vector<std::string>& pems) {
  auto news = std::make_shared<v1::GossipFrame>();
  for (const std::string& pem : pems) {
    if (pem.empty() || pem.size() > 16384) continue;
    absl::StatusOr<UpdateSignatures::Learned> learned = signatures_->Learn(pem);
    if (!learned.ok()) {
      counters_.Add(Counters::kSignatureErrorsFieldNumber);
      Log(absl::StrCat("ignored a certificate from ", from ? from->node_id : "?", ": ",
                       learned.status().message()));
      continue;
    }
    if (learned->new_one) news->mutable_certificates()->add_pem(pem);
  }
  if (news->certificates().pem_size() == 0) return;
  for (auto& [id, m] : members_) {
    if (&m != from && m.links.connected()) SendTo(m, news, SIZE_MAX);
  }
}

}  // namespace reckon::server
