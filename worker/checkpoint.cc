#include "worker/checkpoint.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "codec/sha256.h"

namespace reckon::worker {
namespace {

constexpr char kMagic[] = "RECKONC2";         // format 2
constexpr char kMagicFormat1[] = "RECKONCK";  // format 1: read only
constexpr size_t kMagicSize = 8;
constexpr size_t kHeaderSize = kMagicSize + 32;  // magic and SHA-256

void PutU64(uint64_t v, char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetU64(const char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<uint8_t>(in[i])) << (8 * i);
  return v;
}

// Appends `bytes` in pieces of at most `chunk`, hashing each.
absl::Status AppendHashed(base::AtomicFileWriter& file, codec::Sha256& hash, const void* data,
                          size_t bytes, size_t chunk) {
  const char* p = static_cast<const char*>(data);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(chunk, bytes - done);
    hash.Update(p + done, n);
    RECKON_RETURN_IF_ERROR(file.Append(std::string_view(p + done, n)));
    done += n;
  }
  return absl::OkStatus();
}

// Reads `bytes` into `out` in pieces of at most `chunk`, hashing each.
absl::Status ReadHashed(base::FileReader& file, codec::Sha256& hash, void* out, size_t bytes,
                        size_t chunk) {
  char* p = static_cast<char*>(out);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(chunk, bytes - done);
    RECKON_RETURN_IF_ERROR(file.Read(p + done, n));
    hash.Update(p + done, n);
    done += n;
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<std::vector<T>> FromBytes(const std::string& bytes, size_t count,
                                         const std::string& path, const char* what) {
  if (bytes.size() != count * sizeof(T)) {
    return absl::DataLossError(absl::StrCat(path, ": checkpoint ", what, " has ", bytes.size(),
                                            " bytes, expected ", count * sizeof(T)));
  }
  std::vector<T> v(count);
  if (count > 0) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

}  // namespace

InputTransform InputTransformOf(const v1::Checkpoint& c) {
  InputTransform t;
  t.divisor = c.input_divisor();
  t.mean.assign(c.input_mean().begin(), c.input_mean().end());
  t.inv_stddev.assign(c.input_inv_stddev().begin(), c.input_inv_stddev().end());
  return t;
}

namespace {

// Refuses a checkpoint written under another configuration, naming the field.
absl::Status CheckIdentity(const v1::Checkpoint& c, const CheckpointIdentity& ours,
                           const std::string& path) {
  auto mismatch = [&](const char* field, const auto& theirs, const auto& here) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--resume ", path, ": ", field, " is ", theirs, " in the checkpoint but ", here, " here"));
  };
  if (c.model() != ours.model) return mismatch("model", c.model(), ours.model);
  if (c.fraction_bits() != ours.fraction_bits) {
    return mismatch("fraction bits", c.fraction_bits(), ours.fraction_bits);
  }
  if (c.seed() != ours.seed) return mismatch("seed", c.seed(), ours.seed);
  if (c.optimizer() != ours.optimizer) return mismatch("optimizer", c.optimizer(), ours.optimizer);
  if (c.mode() != ours.mode) return mismatch("codec mode", c.mode(), ours.mode);
  if (c.target_density() != ours.target_density) {
    return mismatch("target density", c.target_density(), ours.target_density);
  }
  if (ours.fixed_step_quanta != 0 && c.step_quanta() != ours.fixed_step_quanta) {
    return mismatch("threshold step (quanta)", c.step_quanta(), ours.fixed_step_quanta);
  }
  if (c.input_mean_size() > 0 && !ours.input.mean.empty()) {
    const InputTransform theirs = InputTransformOf(c);
    if (theirs.mean.size() != ours.input.mean.size()) {
      return mismatch("the input width", theirs.mean.size(), ours.input.mean.size());
    }
    if (theirs.divisor != ours.input.divisor) {
      return mismatch("the input divisor", theirs.divisor, ours.input.divisor);
    }
    for (size_t j = 0; j < theirs.mean.size(); ++j) {
      if (theirs.mean[j] != ours.input.mean[j] ||
          theirs.inv_stddev[j] != ours.input.inv_stddev[j]) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--resume ", path, ": the training data's standardization differs at feature ", j,
            " (mean ", theirs.mean[j], ", 1/stddev ", theirs.inv_stddev[j], " in the checkpoint; ",
            ours.input.mean[j], ", ", ours.input.inv_stddev[j],
            " here): it was trained on other data"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveTrainingState(const std::string& path, const TrainingState& s) {
  v1::Checkpoint c;
  c.set_format_version(1);
  c.set_model(s.identity.model);
  c.set_input_divisor(s.identity.input.divisor);
  *c.mutable_input_mean() = {s.identity.input.mean.begin(), s.identity.input.mean.end()};
  *c.mutable_input_inv_stddev() = {s.identity.input.inv_stddev.begin(),
                                   s.identity.input.inv_stddev.end()};
  c.set_fraction_bits(s.identity.fraction_bits);
  c.set_seed(s.identity.seed);
  c.set_optimizer(s.identity.optimizer);
  c.set_mode(s.identity.mode);
  c.set_target_density(s.identity.target_density);
  c.set_step_quanta(s.step_quanta);
  c.set_density_average(s.density_average);
  c.set_epochs_done(s.epochs_done);
  c.set_samples_into_epoch(s.samples_into_epoch);
  c.set_pretrained(s.pretrained);
  c.set_steps_done(s.steps_done);
  c.set_batch(s.batch);
  c.set_updates_sent(s.updates_sent);
  c.set_wire_bytes(s.wire_bytes);
  c.set_samples_done(s.samples_done);
  c.set_train_seconds(s.train_seconds);
  c.set_weight_hash(s.weight_hash);
  c.set_codec_steps(s.codec.steps);
  *c.mutable_codec_scales() = {s.codec.scales.begin(), s.codec.scales.end()};
  return SaveCheckpoint(path, c, s.weights, s.residual, s.optimizer_state);
}

absl::StatusOr<TrainingState> LoadTrainingState(const std::string& path,
                                                const CheckpointIdentity& expected,
                                                size_t param_count) {
  RECKON_ASSIGN_OR_RETURN(StoredCheckpoint stored, LoadCheckpoint(path));
  const v1::Checkpoint& c = stored.header;
  RECKON_RETURN_IF_ERROR(CheckIdentity(c, expected, path));
  TrainingState s;
  s.identity = expected;
  s.step_quanta = c.step_quanta();
  s.density_average = c.density_average();
  s.epochs_done = c.epochs_done();
  s.samples_into_epoch = c.samples_into_epoch();
  s.pretrained = c.pretrained();
  s.steps_done = c.steps_done();
  s.batch = c.batch();
  // Checked by the codec that takes it up (Backend::LoadCodecState).
  s.codec.steps = c.codec_steps();
  s.codec.scales.assign(c.codec_scales().begin(), c.codec_scales().end());
  const size_t state_count = expected.optimizer == "sgd" ? 0 : param_count;
  auto wrong_size = [&](const char* what, size_t count, size_t expected_count) {
    return absl::DataLossError(absl::StrCat(path, ": checkpoint ", what, " has ", count,
                                            " values, expected ", expected_count));
  };
  if (stored.weights.size() != param_count) {
    return wrong_size("weights", stored.weights.size(), param_count);
  }
  if (stored.residual.size() != param_count) {
    return wrong_size("residual", stored.residual.size(), param_count);
  }
  if (stored.optimizer_state.size() != state_count) {
    return wrong_size("optimizer state", stored.optimizer_state.size(), state_count);
  }
  s.weights = std::move(stored.weights);
  s.residual = std::move(stored.residual);
  s.optimizer_state = std::move(stored.optimizer_state);
  s.updates_sent = c.updates_sent();
  s.wire_bytes = c.wire_bytes();
  s.samples_done = c.samples_done();
  s.train_seconds = c.train_seconds();
  s.weight_hash = c.weight_hash();
  return s;
}

absl::Status SaveCheckpoint(const std::string& path, const v1::Checkpoint& header,
                            std::span<const int64_t> weights, std::span<const float> residual,
                            std::span<const float> optimizer_state, size_t io_chunk_bytes) {
  static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");
  v1::Checkpoint h = header;
  h.set_format_version(2);
  h.clear_weights();
  h.clear_residual();
  h.clear_optimizer_state();
  h.set_weights_bytes(weights.size_bytes());
  h.set_residual_bytes(residual.size_bytes());
  h.set_optimizer_state_bytes(optimizer_state.size_bytes());
  std::string message;
  if (!h.SerializeToString(&message) || message.size() > kMaxCheckpointHeaderBytes) {
    return absl::InternalError(absl::StrCat(path, ": the checkpoint header does not serialize (",
                                            h.ByteSizeLong(), " bytes)"));
  }
  const size_t chunk = std::max<size_t>(1, io_chunk_bytes);
  RECKON_ASSIGN_OR_RETURN(base::AtomicFileWriter file, base::AtomicFileWriter::Create(path));
  // The checksum is known at the end: zeros first, overwritten before Commit.
  RECKON_RETURN_IF_ERROR(file.Append(std::string(kMagic, kMagicSize) + std::string(32, '\0')));
  codec::Sha256 hash;
  char length[8];
  PutU64(message.size(), length);
  RECKON_RETURN_IF_ERROR(AppendHashed(file, hash, length, sizeof(length), chunk));
  RECKON_RETURN_IF_ERROR(AppendHashed(file, hash, message.data(), message.size(), chunk));
  RECKON_RETURN_IF_ERROR(AppendHashed(file, hash, weights.data(), weights.size_bytes(), chunk));
  RECKON_RETURN_IF_ERROR(AppendHashed(file, hash, residual.data(), residual.size_bytes(), chunk));
  RECKON_RETURN_IF_ERROR(
      AppendHashed(file, hash, optimizer_state.data(), optimizer_state.size_bytes(), chunk));
  const codec::Sha256Digest digest = hash.Finish();
  RECKON_RETURN_IF_ERROR(file.WriteAt(
      kMagicSize, std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size())));
  return file.Commit();
}

namespace {

// Format 1: one protobuf with the arrays in it (below 2 GiB by construction).
absl::StatusOr<StoredCheckpoint> LoadFormat1(const std::string& path) {
  RECKON_ASSIGN_OR_RETURN(const std::string file, base::ReadFile(path, kMaxCheckpointBytes));
  const std::string_view body(file.data() + kHeaderSize, file.size() - kHeaderSize);
  const codec::Sha256Digest digest = codec::Sha256Of(body);
  if (std::memcmp(digest.data(), file.data() + kMagicSize, 32) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": checksum mismatch, the checkpoint is corrupt or truncated"));
  }
  StoredCheckpoint stored;
  v1::Checkpoint& c = stored.header;
  if (body.size() > size_t{INT32_MAX} || !c.ParseFromArray(body.data(), int(body.size()))) {
    return absl::DataLossError(absl::StrCat(path, ": checkpoint body does not parse"));
  }
  if (c.format_version() != 1) {
    return absl::DataLossError(
        absl::StrCat(path, ": checkpoint format version ", c.format_version(), " is not 1"));
  }
  auto take = [&](std::string* bytes, auto* out, const char* what) -> absl::Status {
    using T = typename std::remove_pointer_t<decltype(out)>::value_type;
    RECKON_ASSIGN_OR_RETURN(*out, FromBytes<T>(*bytes, bytes->size() / sizeof(T), path, what));
    bytes->clear();
    return absl::OkStatus();
  };
  RECKON_RETURN_IF_ERROR(take(c.mutable_weights(), &stored.weights, "weights"));
  RECKON_RETURN_IF_ERROR(take(c.mutable_residual(), &stored.residual, "residual"));
  RECKON_RETURN_IF_ERROR(
      take(c.mutable_optimizer_state(), &stored.optimizer_state, "optimizer state"));
  return stored;
}

}  // namespace

absl::StatusOr<StoredCheckpoint> LoadCheckpoint(const std::string& path, size_t io_chunk_bytes) {
  RECKON_ASSIGN_OR_RETURN(base::FileReader file, base::FileReader::Open(path));
  const uint64_t size = file.size();
  if (size > kMaxCheckpointBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        path, " is ", size, " bytes, above the checkpoint limit of ", kMaxCheckpointBytes));
  }
  char head[kHeaderSize + 8];
  if (size < sizeof(head)) {
    return absl::DataLossError(absl::StrCat(path, ": not a reckon checkpoint (", size, " bytes)"));
  }
  RECKON_RETURN_IF_ERROR(file.Read(head, kHeaderSize));
  if (std::memcmp(head, kMagicFormat1, kMagicSize) == 0) return LoadFormat1(path);
  if (std::memcmp(head, kMagic, kMagicSize) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not a reckon checkpoint (bad magic)"));
  }
  const size_t chunk = std::max<size_t>(1, io_chunk_bytes);
  codec::Sha256 hash;
  RECKON_RETURN_IF_ERROR(ReadHashed(file, hash, head + kHeaderSize, 8, chunk));
  // Everything below is bounded by the file's size before it is allocated:
  // the checksum is known only at the end.
  const uint64_t message_bytes = GetU64(head + kHeaderSize);
  if (message_bytes > kMaxCheckpointHeaderBytes || message_bytes > size - sizeof(head)) {
    return absl::DataLossError(absl::StrCat(path, ": checkpoint header of ", message_bytes,
                                            " bytes does not fit (at most ",
                                            kMaxCheckpointHeaderBytes, ", file ", size, ")"));
  }
  std::string message(message_bytes, '\0');
  RECKON_RETURN_IF_ERROR(ReadHashed(file, hash, message.data(), message.size(), chunk));
  StoredCheckpoint stored;
  v1::Checkpoint& c = stored.header;
  if (!c.ParseFromString(message)) {
    return absl::DataLossError(absl::StrCat(path, ": checkpoint header does not parse"));
  }
  if (c.format_version() != 2) {
    return absl::DataLossError(
        absl::StrCat(path, ": checkpoint format version ", c.format_version(), " is not 2"));
  }
  const uint64_t after = size - sizeof(head) - message_bytes;
  const uint64_t w = c.weights_bytes(), r = c.residual_bytes(), o = c.optimizer_state_bytes();
  if (w > after || r > after - w || o != after - w - r) {
    return absl::DataLossError(absl::StrCat(path, ": the checkpoint header says ", w, " + ", r,
                                            " + ", o, " bytes of arrays but the file holds ", after,
                                            " after it: truncated or not a checkpoint"));
  }
  if (w % sizeof(int64_t) != 0 || r % sizeof(float) != 0 || o % sizeof(float) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": checkpoint arrays of ", w, ", ", r, " and ", o,
                     " bytes are not whole int64 weights and float32 values"));
  }
  stored.weights.resize(w / sizeof(int64_t));
  stored.residual.resize(r / sizeof(float));
  stored.optimizer_state.resize(o / sizeof(float));
  RECKON_RETURN_IF_ERROR(ReadHashed(file, hash, stored.weights.data(), w, chunk));
  RECKON_RETURN_IF_ERROR(ReadHashed(file, hash, stored.residual.data(), r, chunk));
  RECKON_RETURN_IF_ERROR(ReadHashed(file, hash, stored.optimizer_state.data(), o, chunk));
  const codec::Sha256Digest digest = hash.Finish();
  if (std::memcmp(digest.data(), head + kMagicSize, 32) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": checksum mismatch, the checkpoint is corrupt or truncated"));
  }
  return stored;
}

}  // namespace reckon::worker
