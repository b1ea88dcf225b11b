// File reads and atomic, durable writes for every reckon binary. Errors name the path.
//
// Threads: functions, any thread; an AtomicFileWriter or FileReader is
// one thread's at a time. Errors: kNotFound, kPermissionDenied, kDataLoss
// (short or damaged), kInvalidArgument, kResourceExhausted (past a cap),
// each naming the path.
#ifndef RECKON_BASE_FILES_H_
#define RECKON_BASE_FILES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

namespace reckon::base {

// kNotFound / kPermissionDenied / kDataLoss (read error) naming `path`;
// kResourceExhausted when the file is larger than `max_bytes`.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes);

// Writes `bytes` to a temporary file beside `path`, then renames it over
// `path` (AtomicFileWriter): a reader never sees a half-written file, a
// failed write leaves whatever was at `path` before, and once it returns OK
// a power loss keeps the new file.
absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes);

// A file written whole or not at all, durably, in as many pieces as the
// writer likes (no copy of the whole in memory): the bytes go to a temporary
// file beside `path`; Commit fsyncs it, renames it over `path` and fsyncs
// the folder, so that a power loss before Commit returns leaves the old file
// and after it the new one (a rename alone may reach the disk before the
// data it names). Destroyed without Commit, the temporary is removed and
// `path` is untouched. Used by one thread.
class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> Create(const std::string& path);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  absl::Status Append(std::string_view bytes);
  // Overwrites bytes already appended (a header whose checksum is known
  // only at the end).
  absl::Status WriteAt(uint64_t offset, std::string_view bytes);
  uint64_t size() const { return size_; }
  absl::Status Commit();

 private:
  AtomicFileWriter(std::string path, std::string tmp, int fd)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  std::string path_, tmp_;
  int fd_ = -1;  // -1: committed or moved from
  uint64_t size_ = 0;
};

// A regular file read in pieces, in order (no copy of the whole in memory).
class FileReader {
 public:
  // kNotFound / kPermissionDenied naming `path`; kInvalidArgument when it is
  // not a regular file.
  static absl::StatusOr<FileReader> Open(const std::string& path);
  FileReader(FileReader&& other) noexcept;
  FileReader& operator=(FileReader&&) = delete;
  FileReader(const FileReader&) = delete;
  ~FileReader();

  uint64_t size() const { return size_; }  // at Open
  uint64_t position() const { return position_; }
  // Exactly `bytes` bytes into `out`: kDataLoss naming the path when the
  // file ends first.
  absl::Status Read(char* out, size_t bytes);

 private:
  FileReader(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0, position_ = 0;
};

}  // namespace reckon::base

#endif  // RECKON_BASE_FILES_H_
