#include "worker/checkpoint.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "codec/sha256.h"
#include "worker/files.h"

namespace reckon::worker {
namespace {

constexpr char kMagic[] = "RECKONCK";
constexpr size_t kMagicSize = 8;
constexpr size_t kHeaderSize = kMagicSize + 32;
constexpr size_t kMaxCheckpointBytes = size_t{64} << 30;

}  // namespace

absl::Status SaveCheckpoint(const std::string& path, const v1::Checkpoint& checkpoint) {
  const std::string body = checkpoint.SerializeAsString();
  const codec::Sha256Digest digest = codec::Sha256Of(body);
  std::string file(kMagic, kMagicSize);
  file.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  file += body;
  return WriteFileAtomically(path, file);
}

absl::StatusOr<v1::Checkpoint> LoadCheckpoint(const std::string& path) {
  absl::StatusOr<std::string> file = ReadFile(path, kMaxCheckpointBytes);
  if (!file.ok()) return file.status();
  if (file->size() < kHeaderSize || std::memcmp(file->data(), kMagic, kMagicSize) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not a reckon checkpoint (bad magic)"));
  }
  const std::string_view body(file->data() + kHeaderSize, file->size() - kHeaderSize);
  const codec::Sha256Digest digest = codec::Sha256Of(body);
  if (std::memcmp(digest.data(), file->data() + kMagicSize, 32) != 0) {
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
