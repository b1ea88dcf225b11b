#include "server/snapshot_writer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "codec/fixed_point.h"
#include "codec/weight_checksum.h"

namespace reckon::server {
namespace {

class RefusingWriter : public grpc::ServerWriteReactor<v1::SnapshotChunk> {
 public:
  explicit RefusingWriter(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

size_t SnapshotChunkBytes(int max_message_bytes) {
  constexpr size_t kFraming = 64;
  const size_t room = static_cast<size_t>(std::max(max_message_bytes, 1024)) - kFraming;
  return std::min(size_t{1} << 20, room) / sizeof(int64_t) * sizeof(int64_t);
}

SnapshotWriter::SnapshotWriter(const v1::SnapshotRequest& request, SnapshotCuts* cuts,
                               std::shared_ptr<std::atomic<int>> live,
                               std::shared_ptr<std::atomic<int>> cutting,
                               SnapshotDeadlines* deadlines, grpc::CallbackServerContext* context,
                               Clock::time_point deadline, size_t chunk_bytes,
                               std::chrono::milliseconds cut_wait)
    : chunk_bytes_(chunk_bytes),
      deadlines_(deadlines),
      count_(std::move(live)),
      cutting_(cutting ? std::optional<StreamCount>(std::in_place, std::move(cutting))
                       : std::nullopt),
      cuts_(cuts),
      header_only_(request.header_only()),
      for_export_(request.for_export()),
      stripes_(std::clamp<uint32_t>(request.stripes(), 1, kMaxSnapshotStripes)),
      cut_id_(request.cut_id()),
      stripe_(request.stripe()),
      checksum_at_(request.has_checksum_at()
                       ? std::optional<VersionMap>(FromProto(request.checksum_at()))
                       : std::nullopt),
      asked_at_(Clock::now()),
      cut_wait_(cut_wait) {
  deadlines_->Add(this, context, deadline);
}

SnapshotWriter::Progress SnapshotWriter::Start(NodeService* node) {
  if (cut_id_ != 0 && !header_only_) {
    StartStripe();
    return Progress::kStarted;
  }
  std::optional<NodeService::Snapshot> snap;
  if (node->started() && !header_only_) {
    // The cut first: without a mirror it may not be there yet.
    snap = node->TakeSnapshot(/*with_weights=*/true, asked_at_);
    if (snap->pending) {
      if (cancelled_.load()) {
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled while the replica was cut"));
        return Progress::kStarted;
      }
      if (Clock::now() - asked_at_ < cut_wait_) return Progress::kWaiting;
      node->Count(v1::NodeCounters::kSnapshotsExpiredFieldNumber);
      Finish(
          grpc::Status(grpc::StatusCode::UNAVAILABLE,
                       absl::StrCat("this worker's training thread did not cut its replica within ",
                                    cut_wait_.count(),
                                    " ms (evaluating, re-joining or leaving); ask another peer")));
      return Progress::kStarted;
    }
  }
  v1::SnapshotChunk::Header* h = chunk_.mutable_header();
  *h->mutable_fingerprint() = node->fingerprint();
  h->set_source_node_id(node->node_id());
  h->set_param_count(node->fingerprint().param_count());
  if (for_export_) *h->mutable_input() = node->InputStandardization();
  if (!node->started()) {
    // Joining: it holds nothing yet. Only a probe gets this far.
    h->set_joining(true);
  } else if (header_only_ && checksum_at_) {
    // A witness's answer: what our messages say the checksum is there.
    if (std::optional<uint64_t> at = node->ChecksumAt(*checksum_at_)) {
      h->set_witnessed(true);
      h->set_witnessed_checksum(*at);
    }
    ToProto(node->Applied(), h->mutable_applied());
  } else {
    if (!snap) snap = node->TakeSnapshot(/*with_weights=*/false, asked_at_);
    ToProto(snap->applied, h->mutable_applied());
    h->set_checksum(snap->checksum);
    if (header_only_) {
      // A join probe: may the joiner start from its initial weights and be
      // sent this cut's messages instead (fewer bytes than the weights)?
      const uint64_t weight_bytes = node->fingerprint().param_count() * sizeof(int64_t);
      NodeService::Replay replay = node->ReplayOf(snap->applied, weight_bytes);
      h->set_initial_sha256(std::move(replay.initial_sha256));
      h->set_replay_bytes(replay.bytes.value_or(0));
    }
    if (!header_only_) {
      // A replica that is not what its messages say is never handed on.
      if (!node->CheckSnapshotServed(*snap, node->weight_checksum().Of(snap->weights))) {
        Finish(grpc::Status(grpc::StatusCode::DATA_LOSS,
                            "this node's replica failed its checksum; ask another peer"));
        return Progress::kStarted;
      }
      SnapshotCut cut;
      h->set_param_count(snap->weights.size());
      h->set_weights_sha256(codec::WeightHashOf(snap->weights));
      cut.weights = std::move(snap->weights);
      cut.header = *h;
      if (stripes_ > 1) {
        cut.header.set_stripes(stripes_);
        cut_ = cuts_->Keep(std::move(cut), Clock::now());
      } else {
        cut_ = std::make_shared<const SnapshotCut>(std::move(cut));
      }
      *h = cut_->header;
      node->Count(v1::NodeCounters::kSnapshotsServedFieldNumber);
    }
  }
  BeginWeights(0);
  StartWrite(&chunk_);
  return Progress::kStarted;
}

void SnapshotWriter::OnWriteDone(bool ok) {
  if (!ok || header_only_ || cut_ == nullptr || offset_ >= end_) {
    Finish(ok ? grpc::Status::OK : grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
    return;
  }
  const size_t n = std::min(chunk_bytes_, end_ - offset_);
  chunk_.set_weights(reinterpret_cast<const char*>(cut_->weights.data()) + offset_, n);
  offset_ += n;
  StartWrite(&chunk_);
}

void SnapshotWriter::StartStripe() {
  absl::StatusOr<std::shared_ptr<const SnapshotCut>> cut =
      cuts_->Take(cut_id_, stripe_, Clock::now());
  if (!cut.ok()) {
    Finish(grpc::Status(cut.status().code() == absl::StatusCode::kNotFound
                            ? grpc::StatusCode::NOT_FOUND
                            : grpc::StatusCode::INVALID_ARGUMENT,
                        std::string(cut.status().message())));
    return;
  }
  cut_ = *std::move(cut);
  *chunk_.mutable_header() = cut_->header;
  chunk_.mutable_header()->set_stripe(stripe_);
  BeginWeights(stripe_);
  StartWrite(&chunk_);
}

void SnapshotWriter::BeginWeights(uint32_t stripe) {
  if (cut_ == nullptr) return;
  const ParamRange range =
      StripeRange(cut_->weights.size(), std::max<uint32_t>(cut_->header.stripes(), 1), stripe);
  offset_ = range.begin * sizeof(int64_t);
  end_ = range.end * sizeof(int64_t);
}

grpc::ServerWriteReactor<v1::SnapshotChunk>* RefuseSnapshot(const grpc::Status& status) {
  return new RefusingWriter(status);
}

}  // namespace reckon::server
