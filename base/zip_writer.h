// A zip archive of stored (uncompressed) entries, as numpy's .npz is: the
// local headers, the data, the central directory and its end record
// (PKWARE APPNOTE 4.3), without Zip64. numpy.load, Python's zipfile and
// unzip read it.
//
// Threads: a function, any thread. Errors: an archive past what a zip
// without Zip64 holds (names, entries, 4 GiB) is kInvalidArgument, named.
#ifndef RECKON_BASE_ZIP_WRITER_H_
#define RECKON_BASE_ZIP_WRITER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace reckon::base {

// (name, bytes) in order. kInvalidArgument when a name is empty or longer
// than 65,535 bytes, there are 65,535 entries or more, or the archive
// would reach 4 GiB (that takes Zip64).
absl::StatusOr<std::string> StoredZip(
    const std::vector<std::pair<std::string, std::string>>& entries);

}  // namespace reckon::base

#endif  // RECKON_BASE_ZIP_WRITER_H_
