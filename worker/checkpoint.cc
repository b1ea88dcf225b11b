#include "worker/checkpoint.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/status_macros.h"
#include "codec/sha256.h"

namespace reckon::worker {
namespace {

constexpr char kMagic[] = "RECKONCK";
constexpr size_t kMagicSize = 8;
constexpr size_t kHeaderSize = kMagicSize + 32;
constexpr size_t kMaxCheckpointBytes = size_t{64} << 30;

template <typename T>
std::string ToBytes(const std::vector<T>& v) {
  static_assert(std::endian::native == std::endian::little, "checkpoints are little-endian");
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
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

// Refuses a checkpoint written under another configuration, naming the field.
absl::Status CheckIdentity(const v1::Checkpoint& c, const CheckpointIdentity& ours,
                           const std::string& path) {
  auto mismatch = [&](const char* field, const auto& theirs, const auto& here) {
    return absl::FailedPreconditionError(absl::StrCat("--resume ", path, ": ", field, " is ",
                                                      theirs, " in the checkpoint but ", here,
                                                      " here"));
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
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveTrainingState(const std::string& path, const TrainingState& s) {
  v1::Checkpoint c;
  c.set_format_version(1);
  c.set_model(s.identity.model);
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
  c.set_weights(ToBytes(s.weights));
  c.set_residual(ToBytes(s.residual));
  c.set_optimizer_state(ToBytes(s.optimizer_state));
  c.set_updates_sent(s.updates_sent);
  c.set_wire_bytes(s.wire_bytes);
  c.set_samples_done(s.samples_done);
  c.set_train_seconds(s.train_seconds);
  c.set_weight_hash(s.weight_hash);
  return SaveCheckpoint(path, c);
}

absl::StatusOr<TrainingState> LoadTrainingState(const std::string& path,
                                                const CheckpointIdentity& expected,
                                                size_t param_count) {
  RECKON_ASSIGN_OR_RETURN(const v1::Checkpoint c, LoadCheckpoint(path));
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
  RECKON_ASSIGN_OR_RETURN(s.weights, FromBytes<int64_t>(c.weights(), param_count, path, "weights"));
  RECKON_ASSIGN_OR_RETURN(s.residual,
                          FromBytes<float>(c.residual(), param_count, path, "residual"));
  const size_t state_count = expected.optimizer == "sgd" ? 0 : param_count;
  RECKON_ASSIGN_OR_RETURN(s.optimizer_state, FromBytes<float>(c.optimizer_state(), state_count,
                                                              path, "optimizer state"));
  s.updates_sent = c.updates_sent();
  s.wire_bytes = c.wire_bytes();
  s.samples_done = c.samples_done();
  s.train_seconds = c.train_seconds();
  s.weight_hash = c.weight_hash();
  return s;
}

absl::Status SaveCheckpoint(const std::string& path, const v1::Checkpoint& checkpoint) {
  const std::string body = checkpoint.SerializeAsString();
  const codec::Sha256Digest digest = codec::Sha256Of(body);
  std::string file(kMagic, kMagicSize);
  file.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  file += body;
  return base::WriteFileAtomically(path, file);
}

absl::StatusOr<v1::Checkpoint> LoadCheckpoint(const std::string& path) {
  RECKON_ASSIGN_OR_RETURN(const std::string file, base::ReadFile(path, kMaxCheckpointBytes));
  if (file.size() < kHeaderSize || std::memcmp(file.data(), kMagic, kMagicSize) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not a reckon checkpoint (bad magic)"));
  }
  const std::string_view body(file.data() + kHeaderSize, file.size() - kHeaderSize);
  const codec::Sha256Digest digest = codec::Sha256Of(body);
  if (std::memcmp(digest.data(), file.data() + kMagicSize, 32) != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": checksum mismatch, the checkpoint is corrupt or truncated"));
  }
  v1::Checkpoint checkpoint;
  if (!checkpoint.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return absl::DataLossError(absl::StrCat(path, ": checkpoint body does not parse"));
  }
  if (checkpoint.format_version() != 1) {
    return absl::DataLossError(absl::StrCat(path, ": checkpoint format version ",
                                            checkpoint.format_version(), " is not 1"));
  }
  return checkpoint;
}

}  // namespace reckon::worker
