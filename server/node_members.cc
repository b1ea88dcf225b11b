// One part of GossipNode's methods (server/node.h; docs/architecture.md "The
// gossip node in parts"). Handshakes as the node answers them: Hellos (a
// stream's or a lane's) judged and answered, refusals, certificates learned; the
// membership part (node_membership.h) keeps the table, the dials and the
// failure detector. Each runs on the thread and under the lock its
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

void GossipNode::Refuse(const std::shared_ptr<Link>& link, const std::string& peer,
                        const std::string& reason, bool permanent) {
  core_.Log(
      absl::StrCat("refusing ", link->Describe(), " (node '", peer.substr(0, 64), "'): ", reason));
  if (!link->dialed()) {
    auto frame = std::make_shared<v1::GossipFrame>();
    frame->mutable_refusal()->set_reason(reason);
    frame->mutable_refusal()->set_permanent(permanent);
    if (!permanent) {
      // Its Hello passed the fingerprint and token checks: who refused it
      // tells it where its dial went (Membership::RefusedForNow).
      frame->mutable_refusal()->mutable_refuser()->set_node_id(core_.self.node_id);
      frame->mutable_refusal()->mutable_refuser()->set_incarnation(core_.self.incarnation);
    }
    outbound::SendCounted(core_, *link, frame);
  } else if (permanent) {
    RefusedByDialed(link, absl::StrCat("peer ", link->Describe(), " is not of this cluster: ",
                                       reason));
  }
  core_.membership.table().StopAwaiting(link);
  link->Close();
}

void GossipNode::RefusedByDialed(const std::shared_ptr<Link>& link, const std::string& why) {
  absl::Status cannot_be_a_member = core_.membership.RefusedByDialed(link, why);
  if (!cannot_be_a_member.ok() && core_.fatal.ok()) core_.fatal = std::move(cannot_be_a_member);
}

HelloVerdict GossipNode::Judge(const Link& link, const v1::Hello& hello) const {
  HelloContext context;
  context.fingerprint_and_token =
      core_.CheckPeer(hello.fingerprint(), hello.cluster_token(), hello.self().node_id());
  context.require_identity = core_.options.require_peer_identity;
  context.peer_identity = link.PeerIdentity();
  context.link_dialed = link.dialed();
  context.now = core_.Now();
  context.failure_timeout = core_.options.failure_timeout;
  return core_.membership.table().Judge(hello, std::move(context));
}

void GossipNode::HandleHello(const std::shared_ptr<Link>& link, const v1::Hello& hello) {
  const auto now = core_.Now();
  if (hello.lane() != 0) {
    HandleLaneHello(link, hello);
    return;
  }
  if (!core_.membership.table().AwaitsHello(link)) return;  // a second Hello: ignore
  const std::string& id = hello.self().node_id();
  const HelloVerdict verdict = Judge(*link, hello);
  if (verdict.kind == HelloVerdict::kSelfDial) {
    // We dialed ourselves (our address is in the seed list): remember it.
    core_.membership.DialedSelf(link);
    link->Close();
    return;
  }
  if (verdict.kind == HelloVerdict::kRefuse) {
    core_.counters.Add(verdict.counter);
    Refuse(link, id, verdict.reason, verdict.permanent);
    return;
  }
  Member& m = core_.membership.Admit(link, hello, now);
  if (!link->dialed()) outbound::SendCounted(core_, *link, outbound::MakeHello(core_));
  if (m.links.connected() && m.links.stream() != link) {
    // Two streams for one pair (both dialed at once): both ends keep the one
    // dialed by the smaller node id, so they agree without talking.
    if (KeepsStream(core_.self.node_id, id, link->dialed())) {
      Membership::DropLink(m);
    } else {
      link->Close();
      return;
    }
  }
  m.links.Attach(link, hello.lanes_accepted(), now);
  m.last_heard = now;
  if (core_.signatures != nullptr) {
    // Its handshake certificate first, then everything we know goes to it
    // before any Update can: relayed messages are always verifiable.
    LearnCertificates(&m, {link->PeerCertificate()});
    auto frame = std::make_shared<v1::GossipFrame>();
    for (std::string& pem : core_.signatures->Certificates()) {
      frame->mutable_certificates()->add_pem(std::move(pem));
    }
    outbound::SendTo(core_, m, frame, SIZE_MAX);
  }
  if (core_.membership.Connected(m, now)) {
    core_.Log(absl::StrCat("peer ", id, " (incarnation ", m.incarnation,
                           ") connected: ", link->Describe()));
  }
  SendHeartbeat(m, MakeHeartbeats(/*tick=*/false), SIZE_MAX);
}

void GossipNode::LearnCertificates(const Member* from, const std::vector<std::string>& pems) {
  auto news = std::make_shared<v1::GossipFrame>();
  for (const std::string& pem : pems) {
    if (pem.empty() || pem.size() > 16384) continue;
    absl::StatusOr<UpdateSignatures::Learned> learned = core_.signatures->Learn(pem);
    if (!learned.ok()) {
      core_.counters.Add(Counters::kSignatureErrorsFieldNumber);
      core_.Log(absl::StrCat("ignored a certificate from ", from ? from->node_id : "?", ": ",
                             learned.status().message()));
      continue;
    }
    if (learned->new_one) news->mutable_certificates()->add_pem(pem);
  }
  if (news->certificates().pem_size() == 0) return;
  for (auto& [id, m] : core_.membership.table()) {
    if (&m != from && m.links.connected()) outbound::SendTo(core_, m, news, SIZE_MAX);
  }
}

void GossipNode::HandleLaneHello(const std::shared_ptr<Link>& link, const v1::Hello& hello) {
  if (outbound::LaneRef ours = outbound::FindLane(core_, link); ours.member != nullptr) {
    if (!ours.lane.ours) return;  // a second Hello on a lane: ignore
    // The member's answer to our lane: it must be the member we dialed.
    Member& m = *ours.member;
    if (m.links.LaneUp(ours.lane.index)) return;
    if (hello.self().node_id() != m.node_id || hello.self().incarnation() != m.incarnation ||
        hello.lane() != ours.lane.index) {
      core_.Log(absl::StrCat("lane ", ours.lane.index, " to ", m.node_id, " was answered by '",
                             hello.self().node_id().substr(0, 64), "' incarnation ",
                             hello.self().incarnation(), " lane ", hello.lane(), ": closed"));
      outbound::ForgetLane(core_, ours, core_.Now());
      return;
    }
    m.links.LaneAnswered(ours.lane.index);
    return;
  }
  if (!core_.membership.table().AwaitsHello(link)) return;
  const std::string& id = hello.self().node_id();
  HelloVerdict verdict = Judge(*link, hello);
  if (verdict.kind == HelloVerdict::kSelfDial) {
    // Lanes are dialed to members only, never to a seed: no member dials
    // its own.
    verdict = {HelloVerdict::kRefuse, "a lane to this node itself", false};
  }
  if (verdict.kind == HelloVerdict::kAdmit) {
    if (std::optional<HelloVerdict> refused =
            LaneRefusal(hello, core_.membership.table().members())) {
      verdict = *std::move(refused);
    }
  }
  if (verdict.kind == HelloVerdict::kRefuse) {
    core_.counters.Add(verdict.counter);
    Refuse(link, id, verdict.reason, verdict.permanent);
    return;
  }
  Member& m = *core_.membership.table().Find(id);  // LaneRefusal found its stream up
  core_.membership.table().StopAwaiting(link);
  m.links.AcceptLane(hello.lane(), link, core_.Now());
  outbound::SendCounted(core_, *link, outbound::MakeHello(core_, hello.lane()));
}

}  // namespace reckon::server
