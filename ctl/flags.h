// Command-line flags for reckonctl subcommands: `--name value`,
// `--name=value` and bare `--switch`. An options struct is filled from argv;
// there are no global flags. Unknown flags, missing values and malformed
// numbers are errors that name the flag.
#ifndef RECKON_CTL_FLAGS_H_
#define RECKON_CTL_FLAGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace reckon::ctl {

class FlagSet {
 public:
  explicit FlagSet(std::string command) : command_(std::move(command)) {}

  // Registers a flag writing into `*target`, which must outlive Parse().
  void String(const std::string& name, std::string* target, std::string help);
  void Double(const std::string& name, double* target, std::string help);
  void Int(const std::string& name, int64_t* target, std::string help);
  void Bool(const std::string& name, bool* target, std::string help);
  // A flag that must be given.
  void Require(const std::string& name) { required_.insert(name); }

  // kInvalidArgument naming the flag on: an unknown flag, a value missing or
  // not a number, a required flag absent, or a positional argument.
  absl::Status Parse(const std::vector<std::string>& args);

  // One line per flag, for --help and usage errors.
  std::string Usage() const;

 private:
  struct Flag {
    std::function<absl::Status(const std::string&)> set;
    bool is_switch = false;
    std::string help;
  };
  std::string command_;
  std::map<std::string, Flag> flags_;
  std::set<std::string> required_;
};

}  // namespace reckon::ctl

#endif  // RECKON_CTL_FLAGS_H_

namespace reckon::ctl {

// Parses `args` into `flags` for a subcommand. Returns -1 to go on; otherwise
// the exit code to return: 0 after printing usage for --help, 2 after one
// line on `err` for a usage error.
int ParseFlagsOrExit(FlagSet& flags, const std::vector<std::string>& args, std::ostream& out,
                     std::ostream& err);

}  // namespace reckon::ctl
