// A worker's own update, from the step's emission to the cluster: the one
// path every emitter takes (the trainer, the synthetic member, the flat peer
// of reckon.torch, `reckonctl bench inbound` and `bench transport`).
//
// One call numbers the message (its seq), encodes it, checks once that the
// wire decodes to what was emitted, applies it to the own replica, hands it
// to the peers (the message moved, not copied) and counts it in the metrics
// (docs/design.md "One worker, one step", step 4):
//
//   words --encode--> Update --decode--> DecodedUpdate == words  (the self-check)
//   (a quanta codec: Update's payload checked against the emission's quanta)
//                        |                    |
//                        |                    +--> own replica (ApplyOwnEmission / ApplyUpdates)
//                        +--(moved)--> sink (TrainingPeers::Publish -> TrainingPort::Publish)
//
// The own replica applies the emitted words only after the self-check has
// shown that every peer decodes exactly those: the replicas stay identical
// without applying what the wire decoded (a GPU backend applies its pass's
// words where they already are, on the device).
//
// Threads: one thread calls every method (the training thread, or the
// framework's loop for a flat peer). Not thread-safe.
//
// Errors: an emission the encoder refuses (not ascending, an index past the
// model) is kInvalidArgument; a wire that decodes to other words is
// kInternal (an encoder bug). Either way nothing is applied or sent and the
// seq is not used. An error from the own replica or the sink is returned as
// it is, after which the publisher is not to be used again (the trainer
// stops).
#ifndef RECKON_WORKER_PUBLISHER_H_
#define RECKON_WORKER_PUBLISHER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codec/fixed_point.h"
#include "codec/update_message.h"
#include "model/replica.h"
#include "proto/reckon.pb.h"

namespace reckon::worker {

class WorkerMetrics;

// Where published messages go: TrainingPeers::Publish, or a node's Publish
// (the transport bench). Takes the message (moved) and its decoded form
// (read during the call only).
using PublishSink = std::function<absl::Status(v1::Update, const codec::DecodedUpdate&)>;

struct PublisherOptions {
  std::string node_id;
  uint64_t incarnation = 0;
  uint64_t param_count = 0;
  // The threshold codec of the wire (--wire-codec): Rice or packed32.
  v1::Codec wire_codec = v1::CODEC_THRESHOLD_RICE;
  // Empty: alone (the seq still advances; nothing is sent).
  PublishSink sink;
  // Null: no metrics.
  WorkerMetrics* metrics = nullptr;
  // Stamps each message's emitted_unix_ns (the synthetic member's arrival
  // latencies); off for training, whose messages then stay deterministic.
  bool stamp_emitted = false;
};

// What one publish sent: for the trainer's tallies and the summary.
struct Published {
  uint64_t seq = 0;
  uint64_t updates = 0;     // words (threshold) or parameters (quanta codecs)
  uint64_t wire_bytes = 0;  // the Update's serialized size
};

// Whose words a threshold publish carries.
enum class WordsFrom {
  // The own replica's last emission (Backend::TrainStep / FlatReplica::Emit):
  // applied with ApplyOwnEmission (a GPU applies them from the device).
  kLastEmission,
  // Words made elsewhere (the synthetic member, benches): ApplyUpdates.
  kElsewhere,
};

class Publisher {
 public:
  explicit Publisher(PublisherOptions options);

  // The next message's seq is `published` + 1 (a resumed run alone
  // continues its step count; a member's node starts at 0).
  void ContinueAfter(uint64_t published) { published_ = published; }
  uint64_t published() const { return published_; }

  // A threshold emission: `words` ((sign << 31) | index, ascending) of
  // `step`. `own` may be null (no replica: the transport bench).
  absl::StatusOr<Published> PublishThreshold(model::Replica* own, std::span<const uint32_t> words,
                                             const codec::ThresholdStep& step, WordsFrom from);

  // A quanta codec's emission (onebit, dyntree8, dense): `encoded` holds the
  // codec fields and payload (codec::EncodeWithFeedback's), `quanta` the
  // values every replica adds (empty for the dense codec, whose payload
  // they are: codec::EmittedQuanta). Both are taken: `encoded` is left with no
  // codec fields, and each keeps a buffer (the payload's and the quanta's,
  // of no meaning) for the next emission's encoder to overwrite (codec.h
  // Encode), not to zero again.
  absl::StatusOr<Published> PublishQuanta(model::Replica* own, v1::Update& encoded,
                                          std::vector<int64_t>& quanta);

 private:
  // Fills the message's origin and seq, and the decoded form's header.
  void Number(v1::Codec codec, int64_t step_quanta);
  absl::StatusOr<Published> Send(double density, double tau);

  PublisherOptions options_;
  uint64_t published_ = 0;
  v1::Update message_;
  codec::DecodedUpdate decoded_;
};

}  // namespace reckon::worker

#endif  // RECKON_WORKER_PUBLISHER_H_
