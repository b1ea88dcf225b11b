// One way to parse flags, for reckon-worker and every reckonctl subcommand.
// Flags are Abseil flags (ABSL_FLAG: type, default, help, value parsing). A
// command names the flags it takes in a FlagScope; ParseFlags resets them to
// the command's defaults and walks its arguments:
//   --name value   --name=value   --switch   --noswitch   --switch=false
// Names are written with dashes or underscores (--summary-json is
// --summary_json). A flag outside the scope, a missing or malformed value,
// a stray argument or a required flag not given is kInvalidArgument naming
// the command and the flag. Not thread-safe: the flags are process-wide, as
// Abseil's are; one command parses at a time.
#ifndef RECKON_BASE_FLAGS_H_
#define RECKON_BASE_FLAGS_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace reckon::base {

struct FlagSpec {
  FlagSpec(std::string name, std::string default_value = "", bool required = false)
      : name(std::move(name)), default_value(std::move(default_value)), required(required) {}
  std::string name;            // the Abseil name, with underscores
  std::string default_value;   // this command's default; empty: the flag's own
  bool required = false;       // must be given
  std::string group;           // its heading in --help (FlagScope::Group); empty: "Other"
};

struct FlagScope {
  std::string command;         // "reckonctl status": for messages and usage
  std::vector<FlagSpec> flags;
  // Every flag defined in a source file whose path ends with `file_suffix`
  // (e.g. "worker/main.cc"), sorted by name, with their own defaults.
  static FlagScope FromFile(std::string command, const std::string& file_suffix);
  // Lists `names` under the heading `title` in --help, in this order, the
  // groups in the order they are made (flags in none come last, under
  // "Other"). A hidden group (test-only flags) is listed only by --helpfull;
  // its flags parse as any other. A name not in the scope, or in a group
  // already, is kInvalidArgument.
  absl::Status Group(const std::string& title, const std::vector<std::string>& names,
                     bool hidden = false);
  std::vector<std::string> group_order = {};   // titles, as Group made them
  std::vector<std::string> hidden_groups = {};
};

// Parses `args` (the words after the program and subcommand) into the
// scope's flags. With `pass_through`, arguments that are not flags of the
// scope are appended there, in order, instead of being errors (reckonctl
// local hands them to its workers).
absl::Status ParseFlags(const FlagScope& scope, const std::vector<std::string>& args,
                        std::vector<std::string>* pass_through = nullptr);

// `args` with every `--flags-file PATH` (or `--flags-file=PATH`) replaced,
// in place, by the flags the file holds: flags after it win over the
// file's, the file's over flags before it. The file (a Kubernetes ConfigMap,
// a Compose config) has one flag per line: `--name=value`, `--name value`
// (the value is the rest of the line, spaces included) or `--switch`; blank
// lines and lines starting with # are skipped. A file that cannot be read,
// a line that is not a flag, or a file naming another flags file is
// kInvalidArgument naming the file and line.
absl::StatusOr<std::vector<std::string>> ExpandFlagsFiles(const std::vector<std::string>& args);

// For flags handed on to another program (reckonctl local's to its
// workers): the first argument that looks like a flag (--name, --name=value,
// --noname) and is none of `known` (dashed or underscored alike) is
// kInvalidArgument "COMMAND: unknown flag --x (did you mean --y?)".
absl::Status CheckFlagsKnown(const std::string& command, const std::vector<std::string>& known,
                             const std::vector<std::string>& args);

// One line per flag: its dashed name, its default (or "required") and help,
// under its group's heading where the scope has groups; `full` lists the
// hidden groups too (--helpfull).
std::string FlagUsage(const FlagScope& scope, bool full = false);

// For a command's entry point: --help or -h prints the usage to `out` and
// gives 0 (--helpfull with the hidden groups), as --version does with one line (the program, the commit, the
// build type, CUDA or not); a parse error prints one line to `err` and gives 2; otherwise -1
// (go on). Flags files are expanded first (ExpandFlagsFiles).
int ParseFlagsOrExit(const FlagScope& scope, const std::vector<std::string>& args,
                     std::ostream& out, std::ostream& err,
                     std::vector<std::string>* pass_through = nullptr);
// `args` ask for the usage (--help, -h, --helpfull), which ParseFlagsOrExit printed: a
// command adds what it says of itself only then (not after --version).
bool AsksForHelp(const std::vector<std::string>& args);

}  // namespace reckon::base

#endif  // RECKON_BASE_FLAGS_H_
