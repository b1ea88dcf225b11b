#include "base/flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/exit_codes.h"
#include "base/files.h"
#include "base/version_info.h"  // generated: cmake/version_info.cmake
#include "base/status_macros.h"

namespace reckon::base {
namespace {

std::string Underscored(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string Dashed(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

absl::CommandLineFlag& Find(const FlagScope& scope, const std::string& name) {
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  // A scope naming a flag no file defines is a programming error.
  if (flag == nullptr) {
    std::fprintf(stderr, "%s: no flag named %s is defined\n", scope.command.c_str(), name.c_str());
    std::abort();
  }
  return *flag;
}

absl::Status SetFlag(const FlagScope& scope, absl::CommandLineFlag& flag,
                     const std::string& value) {
  std::string error;
  if (flag.ParseFrom(value, &error)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(scope.command, ": --", Dashed(std::string(flag.Name())),
                                                 " '", value, "': ", error));
}

constexpr size_t kMaxFlagsFileBytes = 1 << 20;

// --flagfile too: Abseil's spelling, which its users type.
bool IsFlagsFile(const std::string& arg) {
  for (const char* name : {"--flags-file", "--flags_file", "--flagfile"}) {
    if (arg == name || absl::StartsWith(arg, absl::StrCat(name, "="))) return true;
  }
  return false;
}

// Edits (insert, delete, substitute) from a to b.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// " (did you mean --x?)" for the name of `names` (underscored) nearest
// `name` (underscored), when it is a typo away: a third of its length at
// most, and at least 1.
std::string Nearest(const std::vector<std::string>& names, const std::string& name) {
  std::string best;
  size_t best_distance = std::max<size_t>(1, name.size() / 3) + 1;
  for (const std::string& candidate : names) {
    const size_t d = EditDistance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best.empty() ? "" : absl::StrCat(" (did you mean --", Dashed(best), "?)");
}

std::string Nearest(const FlagScope& scope, const std::string& name) {
  std::vector<std::string> names;
  for (const FlagSpec& spec : scope.flags) names.push_back(spec.name);
  return Nearest(names, name);
}

// The arguments one line of a flags file stands for (none for a blank line
// or a comment).
absl::Status AppendFlagsLine(const std::string& file, int line_number, absl::string_view line,
                             std::vector<std::string>* out) {
  line = absl::StripAsciiWhitespace(line);
  if (line.empty() || line[0] == '#') return absl::OkStatus();
  const std::string where = absl::StrCat("--flags-file ", file, ":", line_number, ": '",
                                         std::string(line), "'");
  if (!absl::StartsWith(line, "--") || line.size() == 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is not a flag (--name=value, --name value or --switch)"));
  }
  const size_t space = line.find_first_of(" \t");
  const size_t eq = line.find('=');
  const bool one_word =
      space == absl::string_view::npos || (eq != absl::string_view::npos && eq < space);
  const absl::string_view flag = one_word ? line : line.substr(0, space);
  if (IsFlagsFile(std::string(flag))) {
    return absl::InvalidArgumentError(absl::StrCat(where, " names another flags file"));
  }
  out->emplace_back(flag);
  if (!one_word) out->emplace_back(absl::StripLeadingAsciiWhitespace(line.substr(space)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandFlagsFiles(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!IsFlagsFile(args[i])) {
      out.push_back(args[i]);
      continue;
    }
    const size_t eq = args[i].find('=');
    if (eq == std::string::npos && i + 1 >= args.size()) {
      return absl::InvalidArgumentError("--flags-file needs a value");
    }
    const std::string file = eq == std::string::npos ? args[++i] : args[i].substr(eq + 1);
    absl::StatusOr<std::string> text = ReadFile(file, kMaxFlagsFileBytes);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--flags-file ", file, ": ", text.status().message()));
    }
    int line_number = 0;
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      RECKON_RETURN_IF_ERROR(AppendFlagsLine(file, ++line_number, line, &out));
    }
  }
  return out;
}

FlagScope FlagScope::FromFile(std::string command, const std::string& file_suffix) {
  FlagScope scope{std::move(command), {}};
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), file_suffix)) {
      scope.flags.emplace_back(std::string(name));
    }
  }
  std::sort(scope.flags.begin(), scope.flags.end(),
            [](const FlagSpec& a, const FlagSpec& b) { return a.name < b.name; });
  return scope;
}

absl::Status ParseFlags(const FlagScope& scope, const std::vector<std::string>& args,
                        std::vector<std::string>* pass_through) {
  std::map<std::string, const FlagSpec*> specs;
  for (const FlagSpec& spec : scope.flags) {
    absl::CommandLineFlag& flag = Find(scope, spec.name);
    const std::string reset = spec.default_value.empty() ? flag.DefaultValue() : spec.default_value;
    if (absl::Status s = SetFlag(scope, flag, reset); !s.ok()) return s;
    specs[spec.name] = &spec;
  }
  std::set<std::string> given;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() <= 2 || arg.rfind("--", 0) != 0) {
      if (pass_through != nullptr) {
        pass_through->push_back(arg);
        continue;
      }
      return absl::InvalidArgumentError(
          absl::StrCat(scope.command, ": unexpected argument '", arg, "'"));
    }
    const size_t eq = arg.find('=');
    std::string name = Underscored(arg.substr(2, eq == std::string::npos ? eq : eq - 2));
    std::optional<std::string> value;
    if (eq != std::string::npos) value = arg.substr(eq + 1);
    if (!specs.count(name) && name.rfind("no", 0) == 0 && !value &&
        specs.count(name.substr(2)) && Find(scope, name.substr(2)).IsOfType<bool>()) {
      name = name.substr(2);
      value = "false";
    }
    if (!specs.count(name)) {
      if (pass_through != nullptr) {
        pass_through->push_back(arg);
        continue;
      }
      return absl::InvalidArgumentError(absl::StrCat(scope.command, ": unknown flag ",
                                                     arg.substr(0, eq),  // as written
                                                     Nearest(scope, name)));
    }
    absl::CommandLineFlag& flag = Find(scope, name);
    if (!value && flag.IsOfType<bool>()) value = "true";
    if (!value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(scope.command, ": --", Dashed(name), " needs a value"));
      }
      value = args[++i];
    }
    if (absl::Status s = SetFlag(scope, flag, *value); !s.ok()) return s;
    given.insert(name);
  }
  for (const FlagSpec& spec : scope.flags) {
    if (spec.required && !given.count(spec.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(scope.command, ": --", Dashed(spec.name), " is required"));
    }
  }
  return absl::OkStatus();
}

absl::Status FlagScope::Group(const std::string& title, const std::vector<std::string>& names,
                              bool hidden) {
  std::vector<FlagSpec> grouped;
  for (const std::string& name : names) {
    auto it = std::find_if(flags.begin(), flags.end(),
                           [&](const FlagSpec& f) { return f.name == Underscored(name); });
    if (it == flags.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(command, ": group ", title, " names --", Dashed(name), ", not a flag of it"));
    }
    if (!it->group.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(command, ": --", Dashed(name), " is in group ",
                                                     it->group, " already, not ", title));
    }
    it->group = title;
    grouped.push_back(*it);
    flags.erase(it);
  }
  // The group's flags in its order, after the groups made before it and
  // before the flags in none.
  auto first_ungrouped = std::find_if(flags.begin(), flags.end(),
                                      [](const FlagSpec& f) { return f.group.empty(); });
  flags.insert(first_ungrouped, grouped.begin(), grouped.end());
  group_order.push_back(title);
  if (hidden) hidden_groups.push_back(title);
  return absl::OkStatus();
}

std::string FlagUsage(const FlagScope& scope, bool full) {
  std::string out = absl::StrCat("usage: ", scope.command, " [flags]\n");
  auto hidden = [&scope](const std::string& group) {
    return std::find(scope.hidden_groups.begin(), scope.hidden_groups.end(), group) !=
           scope.hidden_groups.end();
  };
  if (!full && !scope.hidden_groups.empty()) {
    absl::StrAppend(&out, "(--helpfull lists the ", absl::StrJoin(scope.hidden_groups, ", "),
                    " flags too)\n");
  }
  const bool headings = !scope.group_order.empty();
  std::string heading;
  for (const FlagSpec& spec : scope.flags) {
    if (!full && hidden(spec.group)) continue;
    if (headings) {
      const std::string title = spec.group.empty() ? "Other" : spec.group;
      if (title != heading) absl::StrAppend(&out, "\n", title, ":\n");
      heading = title;
    }
    absl::CommandLineFlag& flag = Find(scope, spec.name);
    const std::string fallback = spec.default_value.empty() ? flag.DefaultValue() : spec.default_value;
    const std::string shown =
        spec.required ? "required" : absl::StrCat("default ", fallback.empty() ? "\"\"" : fallback);
    absl::StrAppend(&out, "  --", Dashed(spec.name), " (", shown, ")  ", flag.Help(), "\n");
  }
  if (headings) absl::StrAppend(&out, "\nAny command:\n");
  absl::StrAppend(&out, "  --flags-file PATH  read flags from PATH, one per line (# comments); "
                        "flags after it win (also --flagfile)\n");
  absl::StrAppend(&out, "  --version  the commit, build type and CUDA of this build\n");
  return out;
}

absl::Status CheckFlagsKnown(const std::string& command, const std::vector<std::string>& known,
                             const std::vector<std::string>& args) {
  std::vector<std::string> names;
  for (const std::string& k : known) names.push_back(Underscored(k));
  const std::set<std::string> set(names.begin(), names.end());
  for (const std::string& arg : args) {
    if (arg.size() <= 2 || arg.rfind("--", 0) != 0) continue;  // a value
    const std::string name = Underscored(arg.substr(2, arg.find('=') - 2));
    if (set.count(name) || (name.rfind("no", 0) == 0 && set.count(name.substr(2)))) continue;
    return absl::InvalidArgumentError(absl::StrCat(command, ": unknown flag ",
                                                   arg.substr(0, arg.find('=')), Nearest(names, name)));
  }
  return absl::OkStatus();
}

bool AsksForHelp(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(), [](const std::string& a) {
    return a == "--help" || a == "-h" || a == "--helpfull";
  });
}

int ParseFlagsOrExit(const FlagScope& scope, const std::vector<std::string>& args,
                     std::ostream& out, std::ostream& err,
                     std::vector<std::string>* pass_through) {
  if (AsksForHelp(args)) {
    out << FlagUsage(scope, std::find(args.begin(), args.end(), "--helpfull") != args.end());
    return kExitOk;
  }
  for (const std::string& a : args) {
    if (a == "--version") {
      // The program ("reckonctl", not "reckonctl local"): one build.
      out << scope.command.substr(0, scope.command.find(' ')) << " commit " << RECKON_COMMIT
          << ", build " << RECKON_BUILD_TYPE << ", CUDA "
          << (RECKON_BUILT_WITH_CUDA ? "yes" : "no") << "\n";
      return kExitOk;
    }
  }
  absl::StatusOr<std::vector<std::string>> expanded = ExpandFlagsFiles(args);
  absl::Status s = expanded.ok() ? ParseFlags(scope, *expanded, pass_through) : expanded.status();
  if (!s.ok()) {
    const std::string command = expanded.ok() ? "" : scope.command + ": ";
    err << command << s.message() << " (--help lists the flags)\n";
    return kExitUsage;
  }
  return -1;
}

}  // namespace reckon::base
