#include "ctl/summary_json.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "ctl/process.h"

namespace reckon::ctl {

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string SummaryField(const std::string& json, const std::string& key) {
  const std::string needle = absl::StrCat("\"", key, "\": ");
  const size_t at = json.find(needle);
  if (at == std::string::npos) return "";
  const size_t begin = at + needle.size();
  if (begin >= json.size()) return "";
  if (json[begin] == '"') {
    const size_t end = json.find('"', begin + 1);
    return end == std::string::npos ? "" : json.substr(begin + 1, end - begin - 1);
  }
  if (json[begin] == '{') {
    const size_t end = json.find('}', begin);
    return end == std::string::npos ? "" : json.substr(begin, end - begin + 1);
  }
  const size_t end = json.find_first_of(",}", begin);
  return json.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

double SummaryNumber(const std::string& json, const std::string& key) {
  const std::string v = SummaryField(json, key);
  return v.empty() ? 0 : std::strtod(v.c_str(), nullptr);
}

std::string FindWorkerBinary() {
  const std::string dir = ExecutableDir();
  for (const std::string& candidate : {dir + "/../worker/reckon-worker", dir + "/reckon-worker"}) {
    if (std::filesystem::exists(candidate)) {
      return std::filesystem::weakly_canonical(candidate).string();
    }
  }
  return "";
}

}  // namespace reckon::ctl
