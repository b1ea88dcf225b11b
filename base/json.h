// JSON for everything reckon writes or reads: the run summary, the node's
// counters and version vector, `reckonctl local` and benchmark figures.
// nlohmann::json (Debian's nlohmann-json3-dev) does the escaping and the
// parsing; keys stay in the order they were set, so files read in the order
// the docs list them. Readers parse and look fields up by name; a missing
// field or one of another type is an error naming it, never a default.
//
// Threads: values, one thread's at a time; parsing keeps no state. Errors:
// kInvalidArgument naming the field or the position that is wrong.
#ifndef RECKON_BASE_JSON_H_
#define RECKON_BASE_JSON_H_

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace reckon::base {

using Json = nlohmann::ordered_json;

// `text` parsed; kInvalidArgument naming `what` and the parser's complaint
// (with its byte position) when it is not one JSON value.
absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what);

// The file at `path` parsed (at most `max_bytes`); errors name the path.
absl::StatusOr<Json> ReadJsonFile(const std::string& path, size_t max_bytes = 16 << 20);

// Member `key` of the object `json`: kInvalidArgument naming `what` and the
// key when `json` is not an object, the key is absent, or the value has
// another type.
absl::StatusOr<double> JsonNumber(const Json& json, absl::string_view key, absl::string_view what);
absl::StatusOr<std::string> JsonString(const Json& json, absl::string_view key,
                                       absl::string_view what);
absl::StatusOr<bool> JsonBool(const Json& json, absl::string_view key, absl::string_view what);

}  // namespace reckon::base

#endif  // RECKON_BASE_JSON_H_
