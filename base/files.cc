#include "base/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace reckon::base {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  absl::StatusOr<FileReader> file = FileReader::Open(path);
  if (!file.ok()) return file.status();
  if (file->size() > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, " is ", file->size(), " bytes, above the limit of ", max_bytes));
  }
  std::string data(static_cast<size_t>(file->size()), '\0');
  if (absl::Status s = file->Read(data.data(), data.size()); !s.ok()) return s;
  return data;
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  absl::StatusOr<AtomicFileWriter> file = AtomicFileWriter::Create(path);
  if (!file.ok()) return file.status();
  if (absl::Status s = file->Append(bytes); !s.ok()) return s;
  return file->Commit();
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(const std::string& path) {
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot create ", tmp));
  return AtomicFileWriter(path, std::move(tmp), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_(std::move(other.tmp_)),
      fd_(other.fd_),
      size_(other.size_) {
  other.fd_ = -1;
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

absl::Status AtomicFileWriter::Append(std::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(tmp_, " is closed"));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("cannot write ", tmp_));
    done += static_cast<size_t>(n);
  }
  size_ += bytes.size();
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::WriteAt(uint64_t offset, std::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(tmp_, " is closed"));
  if (offset > size_ || bytes.size() > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("cannot overwrite ", bytes.size(), " bytes at ",
                                              offset, " of ", tmp_, " (", size_, " bytes)"));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("cannot write ", tmp_));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(tmp_, " is closed"));
  // The data on the disk before the name that points at it.
  if (::fsync(fd_) != 0) return ErrnoStatus(errno, absl::StrCat("cannot sync ", tmp_));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    return ErrnoStatus(err, absl::StrCat("cannot write ", tmp_));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    return ErrnoStatus(err, absl::StrCat("cannot rename ", tmp_, " to ", path_));
  }
  // The rename itself is an entry in the folder: durable once it is synced.
  const size_t slash = path_.rfind('/');
  const std::string folder =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return ErrnoStatus(errno, absl::StrCat("cannot open folder ", folder));
  const int synced = ::fsync(dir);
  const int err = errno;
  ::close(dir);
  if (synced != 0) return ErrnoStatus(err, absl::StrCat("cannot sync folder ", folder));
  return absl::OkStatus();
}

absl::StatusOr<FileReader> FileReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  return FileReader(path, fd, static_cast<uint64_t>(st.st_size));
}

FileReader::FileReader(FileReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(other.fd_),
      size_(other.size_),
      position_(other.position_) {
  other.fd_ = -1;
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status FileReader::Read(char* out, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::read(fd_, out + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("cannot read ", path_));
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(path_, " ends at byte ", position_ + done, " where ",
                                              bytes - done, " more were expected"));
    }
    done += static_cast<size_t>(n);
  }
  position_ += bytes;
  return absl::OkStatus();
}

}  // namespace reckon::base
