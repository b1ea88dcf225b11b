#include "base/json.h"

#include "absl/strings/str_cat.h"
#include "base/files.h"

namespace reckon::base {
namespace {

// The member, or an error naming why there is none of `type`.
absl::StatusOr<const Json*> Member(const Json& json, absl::string_view key, absl::string_view what,
                                   Json::value_t type, absl::string_view type_name) {
  if (!json.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, " is not a JSON object"));
  const auto it = json.find(std::string(key));
  if (it == json.end()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has no \"", key, "\""));
  }
  const bool matches = type == Json::value_t::number_float ? it->is_number() : it->type() == type;
  if (!matches) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": \"", key, "\" is ", it->type_name(), ", not ", type_name));
  }
  return &*it;
}

}  // namespace

absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not valid JSON: ", e.what()));
  }
}

absl::StatusOr<Json> ReadJsonFile(const std::string& path, size_t max_bytes) {
  absl::StatusOr<std::string> text = ReadFile(path, max_bytes);
  if (!text.ok()) return text.status();
  return ParseJson(*text, path);
}

absl::StatusOr<double> JsonNumber(const Json& json, absl::string_view key, absl::string_view what) {
  absl::StatusOr<const Json*> member =
      Member(json, key, what, Json::value_t::number_float, "a number");
  if (!member.ok()) return member.status();
  return (*member)->get<double>();
}

absl::StatusOr<std::string> JsonString(const Json& json, absl::string_view key,
                                       absl::string_view what) {
  absl::StatusOr<const Json*> member = Member(json, key, what, Json::value_t::string, "a string");
  if (!member.ok()) return member.status();
  return (*member)->get<std::string>();
}

absl::StatusOr<bool> JsonBool(const Json& json, absl::string_view key, absl::string_view what) {
  absl::StatusOr<const Json*> member = Member(json, key, what, Json::value_t::boolean, "a boolean");
  if (!member.ok()) return member.status();
  return (*member)->get<bool>();
}

}  // namespace reckon::base
