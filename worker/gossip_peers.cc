#include "worker/gossip_peers.h"

#include <google/protobuf/reflection.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/stop_signals.h"
#include "server/node_metrics.h"
#include "server/snapshot_cuts.h"
#include "server/version_vector.h"

namespace reckon::worker {

absl::StatusOr<std::unique_ptr<GossipPeers>> GossipPeers::Create(PeerOptions options,
                                                                 std::span<const int64_t> initial,
                                                                 int fraction_bits,
                                                                 std::ostream& log) {
  std::unique_ptr<GossipPeers> peers(new GossipPeers());
  peers->log_ = &log;
  int port = 0;
  RECKON_ASSIGN_OR_RETURN(peers->server_,
                          server::GossipServer::Start(options.listen, options.transport, &port));
  std::string advertise = options.advertise;
  if (advertise.empty()) {
    std::string host = options.listen.substr(0, options.listen.rfind(':'));
    if (host == "0.0.0.0" || host == "[::]" || host.empty()) {
      char name[256] = {};
      gethostname(name, sizeof(name) - 1);
      host = name;
    }
    advertise = absl::StrCat(host, ":", port);
  } else if (advertise.rfind(":0") == advertise.size() - 2) {
    advertise = absl::StrCat(advertise.substr(0, advertise.size() - 2), ":", port);
  }
  options.node.listen_address = advertise;
  // A seed that is our own address is not probed or dialed (one given
  // another way, e.g. 127.0.0.1 for 0.0.0.0, is found by the handshake).
  std::vector<std::string> seeds;
  for (const std::string& seed : options.node.seeds) {
    if (seed != advertise) seeds.push_back(seed);
  }
  options.node.seeds = seeds;
  // The training replica is the only one: the node keeps no mirror to apply
  // every message to a second time (docs/architecture.md "The receive
  // path"); it asks this worker's training thread for cuts and hashes.
  options.node.replica = server::NodeOptions::Replica::kTrainingThread;

  RECKON_ASSIGN_OR_RETURN(peers->node_,
                          server::GossipNode::Create(options.node, initial, fraction_bits));
  peers->options_ = options;
  log << "reckon-worker: node " << options.node.node_id << " incarnation "
      << options.node.incarnation << " listening on " << advertise << " (" << options.listen
      << "), " << seeds.size() << " seed(s)\n";

  server::LinkEvents* events = &peers->node_->service();
  if (options.faults.any()) {
    peers->faults_ = std::make_unique<server::FaultInjector>(
        options.faults, server::OriginKey{options.node.node_id, options.node.incarnation},
        &peers->node_->service(), options.node.incarnation);
    events = peers->faults_.get();
  }
  // Probes are answered while we join too (a joining node holds nothing),
  // so workers started together see each other's "not trained".
  peers->server_->SetNode(&peers->node_->service(), events);
  RECKON_RETURN_IF_ERROR(peers->JoinFromSeeds(seeds));
  server::Dialer dialer = peers->server_->MakeDialer(events);
  if (peers->faults_) dialer = peers->faults_->Wrap(std::move(dialer));
  peers->node_->Start(std::move(dialer));
  if (!peers->replay_.replay_cut.empty()) RECKON_RETURN_IF_ERROR(peers->AwaitReplay());
  return peers;
}

absl::Status GossipPeers::JoinFromSeeds(const std::vector<std::string>& seeds) {
  // Seeds whose snapshot a witness contradicted (or that did not match its
  // own header): never a source or witness again in this join.
  std::set<std::string> refused;
  const server::Clock::time_point join_start = server::Clock::now();
  JoinRules rules;
  rules.bootstrap = options_.bootstrap;
  rules.join_after_messages = options_.join_after_messages;
  rules.join_after_why = options_.join_after_why;
  rules.join_timeout = options_.join_timeout;
  rules.stop = options_.stop;
  const JoinPlanner planner(
      rules, node_->service().InitialSha256(),
      [this](const std::vector<std::string>& probed) { return ProbeSeeds(probed); }, log_);
  for (;;) {
    JoinSource source;
    RECKON_RETURN_IF_ERROR(planner.Find(seeds, refused, join_start, &source));
    if (source.address.empty()) {
      *log_ << "reckon-worker: no peer has trained yet ("
            << (source.answers.empty() ? std::string("no seed")
                                       : absl::StrJoin(source.answers, ", "))
            << "): starting from the seed's weights\n";
      break;
    }
    if (options_.join_by_replay && !source.replay_cut.empty()) {
      *log_ << "reckon-worker: joining by replay: our initial weights are " << source.address
            << "'s; the members' logs send its cut's " << TotalSeqs(source.replay_cut)
            << " messages (" << absl::StrFormat("%.1f KB", source.replay_bytes / 1e3)
            << ", the snapshot: "
            << absl::StrFormat("%.1f MB",
                               options_.node.fingerprint.param_count() * sizeof(int64_t) / 1e6)
            << ")\n";
      replay_ = std::move(source);
      break;
    }
    if (!refused.empty() && source.witnesses.empty()) {
      // A witness contradicted a snapshot: one of the two lied, and we
      // cannot tell which. A snapshot is installed now only if a seed
      // confirms it: a liar as witness must not get the honest source
      // refused and then serve its own unwitnessed.
      RECKON_RETURN_IF_ERROR(WaitForAWitness(planner, join_start, source.address, refused));
      continue;
    }
    const absl::Status s = Rejoin(source.address, source.witnesses);
    if (s.ok()) break;
    if (s.code() == absl::StatusCode::kDataLoss) {
      *log_ << "reckon-worker: snapshot from " << source.address
            << " NOT INSTALLED: " << s.message() << "; that seed is not asked again\n"
            << std::flush;
      refused.insert(source.address);
      continue;
    }
    if (s.code() != absl::StatusCode::kUnavailable &&
        s.code() != absl::StatusCode::kDeadlineExceeded) {
      return s;
    }
    RECKON_RETURN_IF_ERROR(planner.UnlessTimedOut(
        join_start, absl::StrCat("no snapshot installed (the last: ", s.message(), ")")));
    // It went away or stalled between the probe and the snapshot, or no
    // witness could confirm its cut yet: ask again.
    *log_ << "reckon-worker: snapshot from " << source.address << " failed (" << s.message()
          << "); probing again\n";
  }
  return absl::OkStatus();
}

absl::Status GossipPeers::WaitForAWitness(const JoinPlanner& planner,
                                          server::Clock::time_point join_start,
                                          const std::string& source,
                                          const std::set<std::string>& refused) {
  const std::string why = absl::StrCat(
      "a witness contradicted the snapshot of ", absl::StrJoin(refused, ", "),
      "; no other seed answered to confirm the snapshot of ", source, ", so none is installed");
  RECKON_RETURN_IF_ERROR(planner.UnlessTimedOut(join_start, why));
  *log_ << "reckon-worker: " << why << "; probing again\n" << std::flush;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  return absl::OkStatus();
}

v1::SnapshotRequest GossipPeers::SnapshotRequest(bool header_only) const {
  v1::SnapshotRequest request;
  *request.mutable_fingerprint() = options_.node.fingerprint;
  request.mutable_requester()->set_node_id(options_.node.node_id);
  request.mutable_requester()->set_incarnation(options_.node.incarnation);
  request.set_cluster_token(options_.node.cluster_token);
  request.set_header_only(header_only);
  return request;
}

SeedProbes GossipPeers::ProbeSeeds(const std::vector<std::string>& seeds) const {
  const v1::SnapshotRequest request = SnapshotRequest(/*header_only=*/true);
  const uint64_t param_count = options_.node.fingerprint.param_count();
  // Every seed at once: a join's wait is one probe timeout, not one per seed.
  std::vector<absl::StatusOr<server::FetchedSnapshot>> probes(seeds.size(),
                                                              absl::UnavailableError("not probed"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seeds.size(); ++i) {
    threads.emplace_back([&, i] {
      probes[i] = server::FetchSnapshot(seeds[i], request, param_count, options_.join_probe_timeout,
                                        options_.transport.tls, options_.stop);
    });
  }
  for (std::thread& t : threads) t.join();
  return probes;
}

absl::Status GossipPeers::AwaitReplay() {
  // A large cut on a slow link takes long, but keeps arriving: the wait
  // ends after kReplayWait without a message of the cut, or after
  // kReplayDeadline in all (a member trickling it does not hold the join).
  const auto give_up = server::Clock::now() + kReplayDeadline;
  auto until = server::Clock::now() + kReplayWait;
  uint64_t arrived = 0;
  for (;;) {
    const server::VersionMap applied = node_->service().Applied();
    bool all = true;
    uint64_t of_cut = 0;
    for (const auto& [origin, seq] : replay_.replay_cut) {
      const uint64_t have = server::SeqOf(applied, origin);
      if (have < seq) all = false;
      of_cut += std::min(have, seq);
    }
    if (of_cut > arrived) {
      arrived = of_cut;
      until = server::Clock::now() + kReplayWait;
    }
    if (all) {
      node_->service().Count(v1::NodeCounters::kJoinsByReplayFieldNumber);
      *log_ << "reckon-worker: the cut of " << replay_.address
            << " arrived from the members' logs, " << TotalSeqs(applied)
            << " messages applied; training starts there\n";
      return absl::OkStatus();
    }
    if (Stopped()) {
      return absl::CancelledError(
          absl::StrCat(base::StoppedBySignal(), " while the cut's messages arrived"));
    }
    if (server::Clock::now() >= std::min(until, give_up)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  *log_ << "reckon-worker: " << arrived << " of the " << TotalSeqs(replay_.replay_cut)
        << " messages of the cut of " << replay_.address << " arrived ("
        << (server::Clock::now() >= give_up
                ? absl::StrCat(kReplayDeadline.count(), " s in all")
                : absl::StrCat("then none for ", kReplayWait.count(), " s"))
        << "); loading its snapshot instead\n";
  return Rejoin(replay_.address, replay_.witnesses);
}

absl::Status GossipPeers::Rejoin(const std::string& source,
                                 const std::vector<std::string>& witnesses) {
  v1::SnapshotRequest request = SnapshotRequest(/*header_only=*/false);
  const uint64_t param_count = options_.node.fingerprint.param_count();
  request.set_stripes(server::StripesFor(param_count, options_.transport.snapshot_stripes));
  const auto start = server::Clock::now();
  RECKON_ASSIGN_OR_RETURN(
      const server::FetchedSnapshot snap,
      server::FetchSnapshot(source, request, param_count, std::chrono::seconds(60),
                            options_.transport.tls, options_.stop));
  const double seconds = std::chrono::duration<double>(server::Clock::now() - start).count();
  const double megabytes = param_count * sizeof(int64_t) / 1e6;
  *log_ << "reckon-worker: snapshot from " << snap.header.source_node_id() << " (" << source
        << "), " << TotalSeqs(snap.applied) << " messages applied; "
        << absl::StrFormat("%.1f MB in %.2f s over %d connection%s (%.0f Mbit/s)\n", megabytes,
                           seconds, std::max<uint32_t>(snap.header.stripes(), 1),
                           snap.header.stripes() > 1 ? "s" : "", 8 * megabytes / seconds);
  // The source vouches for its own cut: another member's messages must say
  // the same before we train on it (docs/gossip.md "Threat model"): on a
  // first join the other seeds, on a re-join the other live members.
  if (witnesses.empty()) {
    *log_ << "reckon-worker: snapshot from " << source
          << " installed unwitnessed: no other member to confirm its cut\n";
  } else {
    RECKON_RETURN_IF_ERROR(server::ConfirmCut(snap.applied, snap.header.checksum(), source,
                                              witnesses, SnapshotRequest(/*header_only=*/true),
                                              param_count, std::chrono::seconds(10),
                                              options_.transport.tls, options_.stop));
    *log_ << "reckon-worker: the snapshot's cut is confirmed by another member's messages\n";
  }
  return node_->InstallSnapshot(snap.weights, snap.applied, snap.header.checksum(), source);
}

absl::Status GossipPeers::RejoinIfAsked() {
  const std::optional<std::string> source = node_->training().RejoinSource();
  if (!source) return absl::OkStatus();
  const absl::Status s = Rejoin(*source, node_->service().LiveMemberAddresses(*source));
  if (s.ok()) return s;
  const bool no_answer =
      s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded;
  // kFailedPrecondition: its snapshot lacks our own messages that our log
  // let go (every member alive then had them); a member that has them can
  // still be re-joined from.
  const bool lacks_ours = s.code() == absl::StatusCode::kFailedPrecondition;
  if (s.code() == absl::StatusCode::kDataLoss) {
    // A snapshot whose cut a witness contradicts, or whose weights are not
    // what its own header says: never installed; ask another member.
    *log_ << "reckon-worker: snapshot from " << *source << " NOT INSTALLED: " << s.message() << "\n"
          << std::flush;
    node_->training().RejoinFailed(*source, /*need_our_messages=*/false);
    return absl::OkStatus();
  }
  if (!no_answer && !lacks_ours) {
    // A refusal (PERMISSION_DENIED, FAILED_PRECONDITION, ...) from a member
    // while we are one ourselves: the refuser's to explain, not a reason to
    // stop (docs/protocol.md section 3: a refusal changes only what the
    // refuser owns). Another member is asked, or the re-join dropped.
    *log_ << "reckon-worker: re-join from " << *source << " refused: " << s.message() << "\n"
          << std::flush;
    node_->training().RejoinFailed(*source, /*need_our_messages=*/false, /*refused=*/true);
    return absl::OkStatus();
  }
  if (!node_->training().RejoinFailed(*source, lacks_ours) && lacks_ours) return s;
  *log_ << "reckon-worker: re-join from " << *source << " failed (" << s.message()
        << "); trying again from " << node_->training().RejoinSource().value_or(*source) << "\n"
        << std::flush;
  return absl::OkStatus();
}

GossipPeers::~GossipPeers() {
  // Up to a failure timeout for every member to take our Leave (one round
  // trip when links are healthy; a lossy link may need retransmissions).
  if (node_) {
    node_->Stop(/*leave=*/true, std::max(std::chrono::milliseconds(1000),
                                         std::chrono::duration_cast<std::chrono::milliseconds>(
                                             options_.node.failure_timeout)));
  }
  if (server_) server_->Shutdown(std::chrono::milliseconds(2000));
}

absl::Status GossipPeers::Apply(model::Replica& replica, server::Received& received) {
  if (received.replace_weights) {
    RECKON_RETURN_IF_ERROR(replica.LoadWeights(*received.replace_weights));
  }
  // Everything received since the last step in one call: the CUDA backend
  // applies it in a single launch.
  std::vector<model::UpdateRef> batch;
  batch.reserve(received.updates.size());
  for (const auto& u : received.updates)
    batch.push_back({u->step_quanta, u->words, u->decoded_quanta()});
  RECKON_RETURN_IF_ERROR(replica.ApplyUpdateBatch(batch));
  // The node keeps no mirror: the wraps are the training replica's to see
  // (our own messages' included, as the node counted them).
  if (const uint64_t wrapped = replica.WeightsWrapped(); wrapped > wrapped_counted_) {
    node_->service().Count(v1::NodeCounters::kWeightsWrappedFieldNumber,
                           wrapped - wrapped_counted_);
    if (wrapped_counted_ == 0 || wrapped / 1000 != wrapped_counted_ / 1000) {  // not a flood
      *log_ << "reckon-worker: " << wrapped - wrapped_counted_
            << " weight additions passed the int64 range and wrapped (" << wrapped
            << " so far): a member sent a step no training makes\n"
            << std::flush;
    }
    wrapped_counted_ = wrapped;
  }
  if (options_.metrics != nullptr) {
    const auto now = server::Clock::now();
    for (const auto& accepted : received.accepted_at) {
      options_.metrics->OnApplied(std::chrono::duration<double>(now - accepted).count());
    }
  }
  if (received.weights_wanted) {
    // A snapshot waits for this replica: at a step boundary, it is at the
    // cut the node gave with what was just applied (one copy; on a GPU one
    // copy off the device).
    RECKON_ASSIGN_OR_RETURN(std::vector<int64_t> weights, replica.ReadWeights());
    node_->training().OfferTrainingCut(*std::move(received.cut), received.checksum,
                                       std::move(weights));
  }
  return absl::OkStatus();
}

absl::Status GossipPeers::WaitApplying(model::Replica& replica,
                                       const std::function<bool(server::Clock::time_point)>& wait) {
  // A dead peer stops counting after the failure timeout; past twice that,
  // take the step anyway (the next one waits again).
  const auto deadline = server::Clock::now() + 2 * options_.node.failure_timeout;
  while (!wait(server::Clock::now() + std::chrono::milliseconds(50))) {
    server::Received r = node_->training().TakeReceived();
    RECKON_RETURN_IF_ERROR(Apply(replica, r));
    // SIGTERM: this step is the last; the trainer stops before the next.
    if (server::Clock::now() > deadline || Stopped()) break;
  }
  return absl::OkStatus();
}

absl::Status GossipPeers::BeforeStep(model::Replica& replica, uint64_t steps_done) {
  RECKON_RETURN_IF_ERROR(node_->Health());
  RECKON_RETURN_IF_ERROR(RejoinIfAsked());
  node_->training().SetLocalSteps(steps_done);
  // Backpressure: never outrun the links so far that the log would have to
  // drop our own messages before a live peer has them (NodeOptions::
  // max_backlog_bytes).
  RECKON_RETURN_IF_ERROR(WaitApplying(replica, [&](server::Clock::time_point until) {
    return node_->training().WaitWhileBacklogged(until);
  }));
  if (options_.max_lag > 0) {  // bounded staleness: wait for the slowest live peer
    RECKON_RETURN_IF_ERROR(WaitApplying(replica, [&](server::Clock::time_point until) {
      return node_->training().WaitWhileLagging(options_.max_lag, until);
    }));
  }
  if (options_.check_interval.count() > 0 && server::Clock::now() >= next_check_) {
    return CheckReplica(replica, steps_done);
  }
  server::Received received = node_->training().TakeReceived();
  return Apply(replica, received);
}

absl::Status GossipPeers::CheckReplica(model::Replica& replica, uint64_t steps_done) {
  server::Received received = node_->training().TakeReceived(/*with_cut=*/true);
  RECKON_RETURN_IF_ERROR(Apply(replica, received));
  const auto start = server::Clock::now();
  RECKON_ASSIGN_OR_RETURN(const uint64_t measured,
                          replica.Checksum(node_->service().weight_checksum()));
  const auto took = server::Clock::now() - start;
  // At most 1% of the time: a model whose scan takes 50 ms is checked every 5 s.
  next_check_ =
      server::Clock::now() + std::max<server::Clock::duration>(options_.check_interval, 100 * took);
  const double ms = std::chrono::duration<double, std::milli>(took).count();
  node_->training().RecordReplicaCheck(*received.cut, measured, received.checksum, ms);
  if (measured == received.checksum) return absl::OkStatus();
  // This replica is wrong and every step from it would train on wrong
  // weights: replace it by a live peer's, which that peer checks before
  // sending and we check again before installing.
  std::optional<std::string> source = node_->training().RejoinSourceAfterFailedCheck();
  if (!source) {
    *log_ << "reckon-worker: the replica failed its check at step " << steps_done
          << " and no peer is alive to re-join from; checking again at the next interval\n"
          << std::flush;
    return absl::OkStatus();
  }
  *log_ << "reckon-worker: the replica failed its check at step " << steps_done
        << "; re-joining from " << *source << "\n"
        << std::flush;
  if (absl::Status r = Rejoin(*source, node_->service().LiveMemberAddresses(*source)); !r.ok()) {
    *log_ << "reckon-worker: re-join from " << *source << " failed (" << r.message()
          << "); trying again at the next check\n"
          << std::flush;
    next_check_ = server::Clock::now();
    return absl::OkStatus();
  }
  node_->training().CountRejoinAfterFailedCheck();
  server::Received rejoined = node_->training().TakeReceived();
  return Apply(replica, rejoined);
}

absl::Status GossipPeers::Publish(v1::Update message, const codec::DecodedUpdate& decoded) {
  return node_->training().Publish(std::move(message), decoded);
}

absl::Status GossipPeers::Finish(model::Replica& replica, uint64_t steps_done,
                                 const std::atomic<bool>* stop) {
  node_->training().SetTrainingDone(steps_done);
  *log_ << "reckon-worker: finished training; waiting for the cluster to be quiescent\n"
        << std::flush;
  const auto deadline = server::Clock::now() + options_.quiesce_timeout;
  for (;;) {
    if (stop != nullptr && stop->load()) {
      // Not OK: the replica is this node's at the stop, not the cluster's
      // final one (it used to be reported as quiescent).
      return absl::CancelledError(
          absl::StrCat(base::StoppedBySignal(),
                       " before the cluster agreed it is done: this replica is not final"));
    }
    const auto slice = std::min(deadline, server::Clock::now() + std::chrono::milliseconds(500));
    absl::Status s = ApplyUntilQuiescent(replica, slice);
    if (s.ok()) break;
    if (s.code() != absl::StatusCode::kDeadlineExceeded || server::Clock::now() >= deadline) {
      return s;
    }
  }
  return CheckReplicaAtQuiescence(replica);
}

absl::Status GossipPeers::CheckReplicaAtQuiescence(model::Replica& replica) {
  // Quiescent: nothing left to take, so the replica is at the node's vector
  // and must have the checksum its messages give (the node settled with
  // this replica's own hash: the checksum is the independent check).
  server::Received rest = node_->training().TakeReceived();
  RECKON_RETURN_IF_ERROR(Apply(replica, rest));
  RECKON_ASSIGN_OR_RETURN(const uint64_t measured,
                          replica.Checksum(node_->service().weight_checksum()));
  if (measured != rest.checksum) {
    return absl::InternalError(
        absl::StrCat("the replica has checksum ", codec::ChecksumHex(measured),
                     " but the messages it applied give ", codec::ChecksumHex(rest.checksum)));
  }
  return absl::OkStatus();
}

absl::Status GossipPeers::ApplyUntilQuiescent(model::Replica& replica,
                                              server::Clock::time_point until) {
  RECKON_RETURN_IF_ERROR(RejoinIfAsked());
  return node_->training().WaitQuiescent(
      until, [&](server::Received& r) { return Apply(replica, r); },
      [&] { return replica.WeightHash(); });
}

absl::Status GossipPeers::Serve(model::Replica& replica, const std::atomic<bool>& stop,
                                const std::function<absl::Status()>& on_agreement) {
  // The vector of the last agreement: Finish's.
  server::VersionMap agreed = node_->service().Applied();
  while (!stop.load()) {
    absl::Status s =
        ApplyUntilQuiescent(replica, server::Clock::now() + std::chrono::milliseconds(500));
    if (s.code() == absl::StatusCode::kCancelled && stop.load()) break;  // a re-join cut short
    if (s.ok()) {
      if (server::VersionMap now = node_->service().Applied(); now != agreed) {
        // Agreed again, at another vector: the caller reports it.
        RECKON_RETURN_IF_ERROR(CheckReplicaAtQuiescence(replica));
        agreed = std::move(now);
        RECKON_RETURN_IF_ERROR(on_agreement());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // quiescent: nothing to do
    } else if (s.code() != absl::StatusCode::kDeadlineExceeded) {
      return s;
    }
  }
  return absl::OkStatus();
}

void GossipPeers::DescribeInput(const InputTransform& input) {
  v1::InputStandardization proto;
  proto.set_divisor(input.divisor);
  proto.mutable_mean()->Assign(input.mean.begin(), input.mean.end());
  proto.mutable_inv_stddev()->Assign(input.inv_stddev.begin(), input.inv_stddev.end());
  node_->training().SetInputStandardization(std::move(proto));
}

int GossipPeers::TrainingMembers() { return node_->training().TrainingMembers(); }

double GossipPeers::PeerRoundTripSteps() { return node_->training().PeerRoundTripSteps(); }

bool GossipPeers::HoldsMessages() { return TotalSeqs(node_->service().Applied()) > 0; }

uint64_t GossipPeers::PublishedByEarlierLives() {
  uint64_t published = 0;
  for (const auto& [origin, seq] : node_->service().Applied()) {
    if (origin.node_id == options_.node.node_id && origin.incarnation < options_.node.incarnation) {
      published += seq;
    }
  }
  return published;
}

base::Json GossipPeers::VersionVector() {
  base::Json vector = base::Json::object();
  for (const auto& [origin, seq] : node_->service().Applied()) vector[origin.ToString()] = seq;
  return vector;
}

base::Json GossipPeers::Counters() {
  base::Json out = {{"overlay", node_->options().fingerprint.overlay() == v1::GOSSIP_OVERLAY_TREE
                                    ? "tree"
                                    : "mesh"}};
  // Every counter of the node, as the proto names it (NodeCounters: the
  // one list), as JSON numbers: protobuf's own JSON prints uint64 as text.
  const server::GossipNode::Counters c = node_->service().counters();
  const google::protobuf::Descriptor* d = c.GetDescriptor();
  const google::protobuf::Reflection* r = c.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = d->field(i);
    if (!field->is_map()) {
      out[field->name()] = r->GetUInt64(c, field);
      continue;
    }
    base::Json by_key = base::Json::object();
    for (const auto& [key, count] : server::CounterMap(c, field)) by_key[key] = count;
    out[field->name()] = std::move(by_key);
  }
  return out;
}

}  // namespace reckon::worker
