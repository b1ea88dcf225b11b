#include "server/grpc_clients.h"

#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "base/stop_signals.h"
#include "codec/fixed_point.h"
#include "codec/weight_checksum.h"
#include "proto/reckon.grpc.pb.h"
#include "server/grpc_transport.h"
#include "server/member.h"
#include "server/snapshot_cuts.h"

namespace reckon::server {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", s.error_message());
  switch (s.error_code()) {
    case grpc::StatusCode::FAILED_PRECONDITION:
      return absl::FailedPreconditionError(message);
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::PermissionDeniedError(message);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(message);
    case grpc::StatusCode::DATA_LOSS:
      return absl::DataLossError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace

namespace {

// A stub on a fresh channel, for the one-off blocking calls below.
std::unique_ptr<v1::Gossip::Stub> OneOffStub(const std::string& address, const TlsConfig& tls) {
  return v1::Gossip::NewStub(grpc::CreateCustomChannel(address, MakeChannelCredentials(tls),
                                                       GossipChannelArguments(TransportOptions{})));
}

}  // namespace

absl::StatusOr<v1::NodeStatus> FetchStatus(const std::string& address,
                                           std::chrono::milliseconds timeout, const TlsConfig& tls,
                                           const std::string& cluster_token) {
  auto stub = OneOffStub(address, tls);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::NodeStatus status;
  v1::StatusRequest request;
  request.set_cluster_token(cluster_token);
  grpc::Status s = stub->Status(&context, request, &status);
  if (!s.ok()) return FromGrpc(s, absl::StrCat("status of ", address));
  return status;
}

namespace {

using Header = v1::SnapshotChunk::Header;

// Cancels every registered call once `*stop` is set (SIGTERM), so that a
// snapshot of minutes over a slow link does not hold a stopping worker: a
// thread polls the flag every 50 ms while the fetch runs. Any thread may
// Register/Unregister; a context registered after the stop is cancelled at
// once.
class StopWatcher {
 public:
  explicit StopWatcher(const std::atomic<bool>* stop) : stop_(stop) {
    if (stop_ != nullptr) thread_ = std::thread([this] { Watch(); });
  }
  ~StopWatcher() {
    {
      absl::MutexLock l(&mu_);
      done_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }
  StopWatcher(const StopWatcher&) = delete;
  StopWatcher& operator=(const StopWatcher&) = delete;

  void Register(grpc::ClientContext* context) {
    absl::MutexLock l(&mu_);
    contexts_.insert(context);
    if (fired_) context->TryCancel();
  }
  void Unregister(grpc::ClientContext* context) {
    absl::MutexLock l(&mu_);
    contexts_.erase(context);
  }
  bool fired() {
    absl::MutexLock l(&mu_);
    return fired_;
  }

 private:
  void Watch() {
    absl::MutexLock l(&mu_);
    while (!done_) {
      if (!fired_ && stop_->load()) {
        fired_ = true;
        for (grpc::ClientContext* context : contexts_) context->TryCancel();
      }
      mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Milliseconds(50));
    }
  }

  const std::atomic<bool>* const stop_;
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> contexts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Reads one snapshot stream from `address`: the header (checked against the
// model's size), then exactly the weights of the range `on_header` returns
// for it (all of them when the stream turns out unstriped), written in
// place into `weights` (all `param_count` of them; null for a header
// alone). `on_header` runs once the header is in, before the weights are
// read (a striped fetch starts the other stripes there); an error from it
// ends the stream. Stripes write disjoint ranges, so they may run at once.
absl::StatusOr<Header> ReadSnapshotStream(
    const std::string& address, const std::shared_ptr<grpc::Channel>& channel,
    const v1::SnapshotRequest& request, uint64_t param_count,
    std::chrono::system_clock::time_point deadline,
    const std::function<absl::StatusOr<ParamRange>(const Header&)>& on_header, int64_t* weights,
    StopWatcher& watcher) {
  auto stub = v1::Gossip::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(deadline);
  watcher.Register(&context);
  absl::Cleanup unregister = [&] { watcher.Unregister(&context); };
  std::unique_ptr<grpc::ClientReader<v1::SnapshotChunk>> reader = stub->Snapshot(&context, request);
  Header header;
  v1::SnapshotChunk chunk;
  bool have_header = false;
  char* into = nullptr;            // where this stream's weights go
  uint64_t room = 0, written = 0;  // weight bytes this stream carries, and has
  while (reader->Read(&chunk)) {
    absl::Status wrong;
    if (chunk.has_header()) {
      if (have_header) {
        wrong = absl::DataLossError(absl::StrCat(address, ": two snapshot headers"));
      } else if ((param_count != 0 || !request.header_only()) &&
                 chunk.header().param_count() != param_count) {
        wrong = absl::DataLossError(absl::StrCat("snapshot from ", address, " has ",
                                                 chunk.header().param_count(),
                                                 " parameters, expected ", param_count));
      } else {
        have_header = true;
        header = chunk.header();
        absl::StatusOr<ParamRange> range = on_header(header);
        if (range.ok()) {
          room = (range->end - range->begin) * sizeof(int64_t);
          if (weights != nullptr) into = reinterpret_cast<char*>(weights + range->begin);
        } else {
          wrong = range.status();
        }
      }
    } else if (!have_header) {
      wrong = absl::DataLossError(absl::StrCat(address, ": snapshot weights before the header"));
    } else if (weights == nullptr || written + chunk.weights().size() > room) {
      wrong = absl::DataLossError(absl::StrCat("snapshot from ", address, " is too long"));
    } else {
      std::memcpy(into + written, chunk.weights().data(), chunk.weights().size());
      written += chunk.weights().size();
    }
    if (!wrong.ok()) {
      context.TryCancel();
      return wrong;
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return FromGrpc(s, absl::StrCat("snapshot from ", address));
  if (!have_header) return absl::DataLossError(absl::StrCat(address, ": empty snapshot"));
  if (weights != nullptr && written != room) {
    return absl::DataLossError(absl::StrCat("snapshot from ", address, " has ", written,
                                            " weight bytes, expected ", room));
  }
  return header;
}

// Stripe `stripe` of the cut `first` began (its stripe 0), on its own
// connection; its header must be the cut's.
absl::StatusOr<Header> ReadOtherStripe(const std::string& address,
                                       std::shared_ptr<grpc::Channel> channel,
                                       v1::SnapshotRequest request, const Header& first,
                                       uint32_t stripe,
                                       std::chrono::system_clock::time_point deadline,
                                       int64_t* weights, StopWatcher* watcher) {
  request.set_cut_id(first.cut_id());
  request.set_stripe(stripe);
  const std::string what = absl::StrCat("stripe ", stripe, " of ", first.stripes());
  absl::StatusOr<Header> got = ReadSnapshotStream(
      address, channel, request, first.param_count(), deadline,
      [&](const Header& h) -> absl::StatusOr<ParamRange> {
        Header as_first = h;
        as_first.set_stripe(0);
        if (h.stripe() != stripe ||
            !google::protobuf::util::MessageDifferencer::Equals(as_first, first)) {
          return absl::DataLossError(absl::StrCat("snapshot from ", address, ": the header of ",
                                                  what, " is not its cut's"));
        }
        return StripeRange(first.param_count(), first.stripes(), stripe);
      },
      weights, *watcher);
  if (!got.ok()) {
    return absl::Status(got.status().code(), absl::StrCat(what, ": ", got.status().message()));
  }
  return got;
}

}  // namespace

absl::StatusOr<FetchedSnapshot> FetchSnapshot(const std::string& address,
                                              const v1::SnapshotRequest& request,
                                              uint64_t param_count,
                                              std::chrono::milliseconds timeout,
                                              const TlsConfig& tls, const std::atomic<bool>* stop) {
  if (request.cut_id() != 0) {
    return absl::InvalidArgumentError("FetchSnapshot cuts a new snapshot: no cut_id");
  }
  const auto deadline = std::chrono::system_clock::now() + timeout;
  const uint32_t asked =
      request.header_only() ? 1 : std::clamp<uint32_t>(request.stripes(), 1, kMaxSnapshotStripes);
  // One channel per stripe, each its own TCP connection (a local subchannel
  // pool), all connecting now: the other stripes start as soon as stripe
  // 0's header names the cut, without another handshake's round trips.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  grpc::ChannelArguments args = GossipChannelArguments(TransportOptions{});
  if (asked > 1) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  for (uint32_t i = 0; i < asked; ++i) {
    channels.push_back(grpc::CreateCustomChannel(address, MakeChannelCredentials(tls), args));
    if (asked > 1) channels.back()->GetState(/*try_to_connect=*/true);
  }
  FetchedSnapshot out;
  if (!request.header_only()) out.weights.resize(param_count);
  int64_t* const weights = request.header_only() ? nullptr : out.weights.data();
  // Declared before `others`: the stripes' threads use it, and their
  // futures' destructors wait for them.
  StopWatcher watcher(stop);
  std::vector<std::future<absl::StatusOr<Header>>> others;
  // Stripe 0 (or the whole snapshot) comes on this thread; once its header
  // names the cut, the other stripes start on their own connections.
  absl::StatusOr<Header> first = ReadSnapshotStream(
      address, channels[0], request, param_count, deadline,
      [&](const Header& h) -> absl::StatusOr<ParamRange> {
        const uint32_t stripes = std::max<uint32_t>(h.stripes(), 1);
        if (stripes > asked || stripes > kMaxSnapshotStripes || h.stripe() != 0 ||
            (stripes > 1) != (h.cut_id() != 0)) {
          return absl::DataLossError(absl::StrCat("snapshot from ", address, " comes in ",
                                                  h.stripes(), " stripes (cut ", h.cut_id(),
                                                  ", stripe ", h.stripe(), "); asked for ", asked));
        }
        for (uint32_t i = 1; i < stripes; ++i) {
          others.push_back(std::async(std::launch::async, ReadOtherStripe, address, channels[i],
                                      request, h, i, deadline, weights, &watcher));
        }
        return StripeRange(param_count, stripes, 0);
      },
      weights, watcher);
  // Every stripe ends before `out` may go (they write into it).
  absl::Status failed = first.status();
  for (auto& f : others) {
    absl::StatusOr<Header> stripe = f.get();
    if (failed.ok()) failed = stripe.status();
  }
  if (watcher.fired()) {
    return absl::CancelledError(
        absl::StrCat(base::StoppedBySignal(), " while fetching a snapshot from ", address));
  }
  RECKON_RETURN_IF_ERROR(failed);
  out.header = *first;
  out.header.clear_stripe();
  out.applied = FromProto(out.header.applied());
  if (request.header_only()) return out;
  if (codec::WeightHashOf(out.weights) != out.header.weights_sha256()) {
    return absl::DataLossError(
        absl::StrCat("snapshot from ", address, " does not match its SHA-256"));
  }
  return out;
}

absl::Status ConfirmCut(const VersionMap& applied, uint64_t checksum, const std::string& source,
                        const std::vector<std::string>& witnesses, v1::SnapshotRequest probe,
                        uint64_t param_count, std::chrono::milliseconds timeout,
                        const TlsConfig& tls, const std::atomic<bool>* stop) {
  probe.set_header_only(true);
  ToProto(applied, probe.mutable_checksum_at());
  const auto deadline = Clock::now() + timeout;
  std::map<std::string, std::string> why_not;  // per witness, its last answer
  for (;;) {
    for (const std::string& witness : witnesses) {
      absl::StatusOr<FetchedSnapshot> answer =
          FetchSnapshot(witness, probe, param_count, std::chrono::seconds(2), tls, stop);
      if (answer.status().code() == absl::StatusCode::kCancelled) return answer.status();
      if (!answer.ok()) {
        why_not[witness] = std::string(answer.status().message().substr(0, 200));
        continue;
      }
      const v1::SnapshotChunk::Header& h = answer->header;
      if (!h.witnessed()) {
        why_not[witness] = h.joining() ? "joining" : "has not applied that far";
        continue;
      }
      if (h.witnessed_checksum() != checksum) {
        return absl::DataLossError(absl::StrCat(
            "the snapshot from ", source, " claims checksum ", codec::ChecksumHex(checksum),
            " at its cut, but the messages of ", witness, " (", h.source_node_id().substr(0, 64),
            ") give ", codec::ChecksumHex(h.witnessed_checksum()), " there"));
      }
      return absl::OkStatus();
    }
    if (Clock::now() >= deadline) break;
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(
          absl::StrCat(base::StoppedBySignal(),
                       " while asking witnesses to confirm the snapshot from ", source));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<std::string> lines;
  for (const auto& [witness, why] : why_not) lines.push_back(absl::StrCat(witness, ": ", why));
  return absl::UnavailableError(absl::StrCat("no member confirmed the cut of the snapshot from ",
                                             source, " within ", timeout.count(), " ms (",
                                             absl::StrJoin(lines, "; "), ")"));
}
}  // namespace reckon::server
