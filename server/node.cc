#include "server/node.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "codec/codec.h"
#include "codec/update_words.h"
#include "server/anti_entropy.h"
#include "server/lanes.h"
#include "server/membership.h"

namespace reckon::server {

bool ValidNodeId(const std::string& id) {
  if (id.empty() || id.size() > 63) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<GossipNode>> GossipNode::Create(NodeOptions options,
                                                               std::span<const int64_t> initial,
                                                               int fraction_bits) {
  if (!ValidNodeId(options.node_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node id '", options.node_id, "' must be 1-63 characters of [A-Za-z0-9._-]"));
  }
  if (initial.size() > codec::kMaxParamCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("param_count ", initial.size(), " exceeds 2^31"));
  }
  const codec::WeightChecksum checksum(options.fingerprint.seed());
  std::optional<AppliedState> state;
  if (options.replica == NodeOptions::Replica::kMirror) {
    // The node never reads the float copy: it keeps none.
    absl::StatusOr<codec::FixedPointReplica> mirror = codec::FixedPointReplica::Create(
        initial.size(), fraction_bits, codec::FixedPointReplica::FloatCopy::kNone);
    if (!mirror.ok()) return mirror.status();
    if (absl::Status s = mirror->Load(initial); !s.ok()) return s;
    state.emplace(*std::move(mirror), checksum, AppliedState::Prefetch::kOn);
  } else {
    // Checked as a mirror's would be: the cluster's fraction bits.
    if (absl::Status s = codec::FixedPointReplica::Create(0, fraction_bits).status(); !s.ok()) {
      return s;
    }
    state.emplace(initial.size(), checksum.Of(initial));
  }
  const bool clock_injected = static_cast<bool>(options.clock);
  auto node = std::unique_ptr<GossipNode>(
      new GossipNode(std::move(options), *std::move(state), clock_injected));
  {
    // O(param_count), once: a probe's answer says it (a join by replay).
    std::string initial_sha256 = codec::WeightHashOf(initial);
    absl::MutexLock l(&node->core_.mu);
    node->core_.initial_sha256 = std::move(initial_sha256);
  }
  return node;
}

namespace {

NodeOptions WithClock(NodeOptions options) {
  if (!options.clock) options.clock = [] { return Clock::now(); };
  return options;
}

// The validation threads of the receive path (the node thread is one of
// them).
std::unique_ptr<base::ThreadPool> ValidationPool(const NodeOptions& o) {
  const int threads = o.receive_threads > 0
                          ? o.receive_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::make_unique<base::ThreadPool>(threads, "reckon-recv");
}

}  // namespace

GossipNode::GossipNode(NodeOptions options, AppliedState state, bool clock_injected)
    : core_(WithClock(std::move(options)), std::move(state), clock_injected),
      training_(core_),
      service_(core_),
      validators_(ValidationPool(core_.options)) {}

GossipNode::~GossipNode() { Stop(false, std::chrono::milliseconds(0)); }

void GossipNode::Start(Dialer dialer) {
  absl::MutexLock l(&core_.mu);
  core_.membership.Start(std::move(dialer), core_.Now());
  core_.started.store(true);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "reckon-gossip");
    Run();
  });
}

void GossipNode::Stop(bool leave, std::chrono::milliseconds flush) {
  std::vector<std::shared_ptr<Link>> links, told;
  {
    absl::MutexLock l(&core_.mu);
    if (core_.stopping) return;
    core_.stopping = true;
    core_.inbox.Stop();
    outbound::PushPublished(core_);  // our last messages go before our Leave
    auto leave_frame = std::make_shared<v1::GossipFrame>();
    leave_frame->mutable_leave()->set_reason("shutting down");
    // Our last word before the Leave: where we settled, and with which
    // hash. A node that saw the agreement and leaves before its next
    // heartbeat fell due would otherwise leave without having said it
    // settled, and a member waiting for a majority would not count it
    // (docs/protocol.md section 6).
    const HeartbeatWriter::Bases last_word =
        leave ? MakeHeartbeats(/*tick=*/false) : HeartbeatWriter::Bases{};
    for (auto& [id, m] : core_.membership.table()) {
      if (!m.links.connected()) continue;
      if (leave) {
        outbound::SendCounted(core_, *m.links.stream(),
                              core_.heartbeats.For(m, last_word, core_.membership.table()));
        outbound::SendCounted(core_, *m.links.stream(), leave_frame);
        told.push_back(m.links.stream());
      }
      for (std::shared_ptr<Link>& link : m.links.All()) links.push_back(std::move(link));
    }
    for (auto& link : core_.membership.table().AwaitingHello()) links.push_back(std::move(link));
    for (auto& link : core_.membership.dials().Pending()) links.push_back(std::move(link));
    core_.changed.SignalAll();
  }
  const auto deadline = Clock::now() + flush;
  // A member drops its stream when our Leave arrives: until each has, the
  // Leave (and the settled heartbeats before it) may still be on its way,
  // and closing now (a process exit resets the connection) could lose the
  // last word a member waits for to end. Seen on lossy links.
  while (!core_.inbox.ClosedSinceStop(told) && Clock::now() < deadline) {
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

void GossipNode::Run() {
  Clock::time_point next_tick = core_.Now();
  for (;;) {
    // Only the inbox's lock while waiting: a transport thread enqueueing a
    // frame never waits behind core_.mu (whoever holds it).
    Inbox::Batch batch;
    if (!core_.inbox.Take(next_tick, &batch)) return;
    core_.last_loop_ns.store(Clock::now().time_since_epoch().count());
    // In slices whose decoded form stays under DecodedSliceBytes(): a batch
    // may hold the inbox's cap of frames, and decoded all at once they
    // could take 64x that. At least one slice, empty when the wait ended
    // for the tick alone: HandleBatch ticks.
    do {
      Slice slice = TakeSlice(&batch.events, core_.param_count, DecodedSliceBytes());
      ValidateUpdates(slice);
      if (!HandleBatch(slice.events, next_tick)) return;
    } while (!batch.events.empty());  // each slice's memory goes before their links read on
    for (const std::shared_ptr<Link>& link : batch.to_resume) link->ResumeReading();
  }
}

size_t GossipNode::DecodedSliceBytes() const {
  return std::clamp<size_t>(size_t(validators_->threads()) << 21, size_t{8} << 20,
                            size_t{64} << 20);
}

void GossipNode::ValidateUpdates(Slice& slice) {
  std::vector<Inbox::Event*> updates;
  for (Inbox::Event& e : slice.events) {
    if (e.kind == Inbox::Event::kFrame && e.frame.has_update()) updates.push_back(&e);
  }
  if (updates.empty()) return;
  auto validate = [this](Inbox::Event& e) {
    e.validated = ValidateUpdate(e.frame.update(), core_.param_count, core_.checksum);
    if (core_.signatures != nullptr)
      e.validated->signature = core_.signatures->Verify(e.frame.update());
  };
  if (slice.decoded_bytes < kParallelValidationBytes) {
    // Little work: on this thread alone. Handed to the other threads it
    // would wait for each of them to be scheduled, and on a loaded machine
    // that delay (not the work) made every small message late (a tree of
    // synthetic members under the sanitizers sent 5% more repairs).
    for (Inbox::Event* e : updates) validate(*e);
    return;
  }
  validators_->ParallelFor(
      updates.size(),
      [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) validate(*updates[i]);
      },
      /*min_chunk=*/1);
}

bool GossipNode::HandleBatch(std::deque<Inbox::Event>& batch, Clock::time_point& next_tick) {
  // The node's lock per run of events whose updates decode to at most
  // kLockedRunBytes, not per slice (up to DecodedSliceBytes()): the
  // training thread and the service wait at most for one run's
  // bookkeeping. What a run accepted is added to the mirror after the lock
  // (mirror.h): on a node with a mirror, that add is the bulk of the
  // receive path's work. Not per event: a training thread taking what
  // arrived as it comes then contends for the lock once a message, and a
  // worker's node took in 0.7x the small messages (`reckonctl bench
  // inbound`, default size, gpu-host).
  // Ticks come due inside a long batch too (a backlog of large messages
  // on a loaded machine takes seconds): the heartbeats that tell peers
  // this node is alive must not wait for the backlog to drain.
  auto tick_if_due = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu) {
    const auto now = core_.Now();
    if (now < next_tick) return;
    Tick(now);
    next_tick = now + core_.options.heartbeat_interval;
  };
  do {
    Slice run = TakeSlice(&batch, core_.param_count, kLockedRunBytes);
    {
      absl::MutexLock l(&core_.mu);
      if (core_.stopping) return false;
      // Every run, not a batch's first only: the training thread publishes
      // between runs (the lock is let go for AddToMirror), and a message
      // logged but not pushed looked to this run's anti-entropy like one the
      // peer lacks: it went out as a repair
      // (GossipNode.OriginsQueuedStreamIsNotDoubledByRelays, 1 in 120 under
      // load).
      outbound::PushPublished(core_);
      for (Inbox::Event& e : run.events) {
        HandleEvent(e);
        tick_if_due();
      }
      tick_if_due();
      if (batch.empty()) core_.changed.SignalAll();
    }
    AddToMirror();
  } while (!batch.empty());
  return true;
}

void GossipNode::AddToMirror() {
  if (core_.mirror == nullptr) return;
  core_.CountMirrorReport(core_.mirror->AddQueued(
      [this](const codec::DecodedUpdate& decoded) { return StripedApply(decoded); }));
}

void GossipNode::HandleEvent(Inbox::Event& e) {
  const auto now = core_.Now();
  switch (e.kind) {
    case Inbox::Event::kUp:
      core_.membership.AwaitHello(e.link, now);
      return;
    case Inbox::Event::kClosed:
      HandleLinkClosed(e.link, e.why, now);
      return;
    case Inbox::Event::kFrame:
      break;
  }
  v1::GossipFrame& f = e.frame;
  core_.counters.Add(Counters::kBytesReceivedFieldNumber, e.frame_bytes);
  if (f.has_hello()) {
    HandleHello(e.link, f.hello());
    return;
  }
  if (f.has_refusal()) {
    core_.Log(
        absl::StrCat("refused by ", e.link->Describe(), ": ", f.refusal().reason().substr(0, 200)));
    // A Refusal is believed only as the answer to our own Hello: on a
    // stream we dialed whose handshake has not completed. Anyone can open a
    // stream to us and send one (an outsider without the token, any
    // holder of a certificate of the CA): on a stream we accepted, or after
    // a handshake, it only ends that stream. A lane refused is only a lane
    // lost (dialed again later): the member's stream took us, so it is of
    // this cluster.
    // Believed, it is the refuser's word on its own stream and address
    // only (RefusedByDialed).
    const bool answer_to_our_hello =
        e.link->dialed() && core_.membership.table().AwaitsHello(e.link);
    if (answer_to_our_hello && f.refusal().permanent()) {
      RefusedByDialed(e.link, absl::StrCat("refused by peer ", e.link->Describe(), ": ",
                                           f.refusal().reason()));
    } else if (answer_to_our_hello && f.refusal().has_refuser()) {
      core_.membership.RefusedForNow(
          e.link, {f.refusal().refuser().node_id(), f.refusal().refuser().incarnation()});
    }
    e.link->Close();
    return;
  }
  Member* m = core_.membership.table().FindByStream(e.link);
  if (m == nullptr) {
    // A lane's, or a frame before a handshake (a protocol error: ignored).
    HandleLaneFrame(e.link, f, std::move(e.validated), now);
    return;
  }
  m->last_heard = now;
  // Only updates are counted (the loss evidence of anti-entropy): a
  // heartbeat may overtake the updates queued before it (Link::SendUrgent).
  if (f.has_update()) m->links.CountReceived(0);
  if (core_.membership.HeardAgain(*m, now))
    core_.Log(absl::StrCat("peer ", m->node_id, " is alive again"));
  if (f.has_update()) {
    HandleUpdate(*m, std::make_shared<v1::GossipFrame>(std::move(f)), std::move(e.validated));
  } else if (f.has_certificates()) {
    if (core_.signatures != nullptr) {
      LearnCertificates(m, {f.certificates().pem().begin(), f.certificates().pem().end()});
    }
  } else if (f.has_heartbeat()) {
    HandleHeartbeat(*m, f.heartbeat(), now);
  } else if (f.has_leave()) {
    core_.Log(absl::StrCat("peer ", m->node_id, " left: ", f.leave().reason()));
    core_.membership.Left(*m);
  } else if (f.has_rejoin()) {
    HandleRejoinRequired(*m, f.rejoin());
  }
}

void GossipNode::HandleLinkClosed(const std::shared_ptr<Link>& link, const std::string& why,
                                  Clock::time_point now) {
  core_.inbox.Forget(link.get());
  core_.membership.LinkClosed(link);
  if (Member* m = core_.membership.table().FindByStream(link)) {
    core_.Log(absl::StrCat("stream to ", m->node_id, " closed: ", why));
    m->links.StreamClosed();
  } else if (outbound::LaneRef ref = outbound::FindLane(core_, link); ref.member != nullptr) {
    if (ref.lane.ours) {
      core_.Log(
          absl::StrCat("lane ", ref.lane.index, " to ", ref.member->node_id, " closed: ", why));
    }
    outbound::ForgetLane(core_, ref, now);
  }
}

void GossipNode::Tick(Clock::time_point now) {
  core_.heartbeats.NextTick();
  core_.UpdateSettled();
  core_.handoff.DropCut(Clock::now() -
                        TrainingPort::kTrainingCutKept);  // steady time, as it was made
  const HeartbeatWriter::Bases heartbeat = MakeHeartbeats(/*tick=*/true);
  // Frames that arrived but wait in the inbox count as heard.
  const std::map<const Link*, Clock::time_point> arrivals = core_.inbox.LastArrivals();
  for (auto& [id, m] : core_.membership.table()) {
    if (!m.links.connected()) continue;
    auto arrived = arrivals.find(m.links.stream().get());
    if (arrived != arrivals.end()) m.last_heard = std::max(m.last_heard, arrived->second);
  }
  core_.membership.DetectFailures(now);
  for (auto& [id, m] : core_.membership.table()) {
    if (m.links.connected() &&
        core_.heartbeats.Due(m, core_.membership.tree(), core_.membership.ring())) {
      SendHeartbeat(m, heartbeat, 2 * core_.options.send_queue_byte_cap);
    }
    if (m.links.connected()) AntiEntropy(m, now);
    if (m.links.connected()) outbound::DialLanes(core_, m, now);
    ComparePeerCheck(m);
  }
  CollectGarbage(now);
  core_.membership.CloseSilentStreams(now);
  for (const std::shared_ptr<Link>& link : core_.membership.DialDue(now)) {
    outbound::SendCounted(core_, *link, outbound::MakeHello(core_));
  }
}

void GossipNode::CollectGarbage(Clock::time_point now) {
  // Until every seed had its chance to connect we do not know who needs what.
  if (now - core_.membership.started() < core_.options.failure_timeout) return;
  for (const auto& [id, m] : core_.membership.table()) {
    if (m.state() == MemberState::kConnecting) return;
  }
  // Per origin, the least any live member (and we) applied. Our own
  // messages stay while a dead member lacks them too: it may come back (a
  // member marked dead under load, a healed partition), we are the one node
  // sure to hold them, and a re-join of ours from a snapshot without them
  // needs them (InstallSnapshot). The byte cap still bounds the log.
  VersionMap floor;
  for (const auto& [origin, entries] : core_.log.origins()) {
    uint64_t least = SeqOf(core_.state.applied(), origin);
    for (const auto& [id, m] : core_.membership.table()) {
      const bool counts = m.state() == MemberState::kAlive ||
                          (origin == core_.self && m.state() == MemberState::kDead);
      if (counts) least = std::min(least, SeqOf(m.applied, origin));
    }
    floor[origin] = least;
  }
  core_.log.Collect(floor, now);
}

absl::Status GossipNode::Health() {
  absl::MutexLock l(&core_.mu);
  return core_.fatal;
}

}  // namespace reckon::server
