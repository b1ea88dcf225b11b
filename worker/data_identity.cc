#include "worker/data_identity.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/sha256.h"
#include "worker/dataset.h"
#include "worker/npy_dataset.h"

namespace reckon::worker {

namespace {

constexpr uint64_t kEndBytes = uint64_t{64} << 10;

// Hashes the file's base name, size, first and last kEndBytes bytes.
absl::Status HashEnds(const std::string& path, codec::Sha256& hash) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(path, ": ", ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be opened"));
  const std::string name = std::filesystem::path(path).filename().string();
  hash.Update(name.data(), name.size() + 1);  // with its terminator: names do not run together
  hash.Update(&size, sizeof(size));
  std::string bytes(std::min(size, 2 * kEndBytes), '\0');
  const uint64_t head = std::min(size, kEndBytes);
  in.read(bytes.data(), std::streamsize(head));
  if (size > head) {
    const uint64_t tail = std::min(size - head, kEndBytes);
    in.seekg(std::streamoff(size - tail));
    in.read(bytes.data() + head, std::streamsize(tail));
  }
  if (!in) return absl::DataLossError(absl::StrCat(path, ": could not be read"));
  hash.Update(bytes.data(), bytes.size());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> DataIdentity(const std::string& dir) {
  codec::Sha256 hash;
  std::vector<std::string> files;
  std::string summary;
  if (IsNpyDataset(dir)) {
    RECKON_ASSIGN_OR_RETURN(const NpyDatasetShape shape, InspectNpyDataset(dir));
    files = shape.train_x;
    files.insert(files.end(), shape.train_y.begin(), shape.train_y.end());
    files.insert(files.end(), {shape.test_x, shape.test_y});
    summary = absl::StrCat("npy train ", shape.train_samples, " test ", shape.test_samples, " x",
                           shape.features);
  } else {
    RECKON_ASSIGN_OR_RETURN(const size_t train, CountIdxSamples(dir, "train"));
    RECKON_ASSIGN_OR_RETURN(const size_t test, CountIdxSamples(dir, "t10k"));
    for (const char* prefix : {"train", "t10k"}) {
      for (const char* what : {"-images-idx3-ubyte", "-labels-idx1-ubyte"}) {
        files.push_back(FindIdxFile(dir, absl::StrCat(prefix, what)));
      }
    }
    summary = absl::StrCat("idx train ", train, " test ", test);
  }
  for (const std::string& f : files) RECKON_RETURN_IF_ERROR(HashEnds(f, hash));
  return absl::StrCat(summary, " ", codec::ToHex(hash.Finish()).substr(0, 16));
}

}  // namespace reckon::worker
