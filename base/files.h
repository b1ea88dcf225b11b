// Whole-file reads and atomic writes for every reckon binary. Errors name the path.
#ifndef RECKON_BASE_FILES_H_
#define RECKON_BASE_FILES_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace reckon::base {

// kNotFound / kPermissionDenied / kDataLoss (read error) naming `path`;
// kResourceExhausted when the file is larger than `max_bytes`.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes);

// Writes `bytes` to a temporary file beside `path`, then renames it over
// `path`: a reader never sees a half-written file, and a failed write leaves
// whatever was at `path` before.
absl::Status WriteFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace reckon::base

#endif  // RECKON_BASE_FILES_H_
