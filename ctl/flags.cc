#include "ctl/flags.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace reckon::ctl {

void FlagSet::String(const std::string& name, std::string* target, std::string help) {
  flags_[name] = {[target](const std::string& v) {
                    *target = v;
                    return absl::OkStatus();
                  },
                  false, std::move(help)};
}

void FlagSet::Double(const std::string& name, double* target, std::string help) {
  flags_[name] = {[name, target](const std::string& v) {
                    double d;
                    if (!absl::SimpleAtod(v, &d) || !std::isfinite(d)) {
                      return absl::InvalidArgumentError(
                          absl::StrCat("--", name, ": '", v, "' is not a finite number"));
                    }
                    *target = d;
                    return absl::OkStatus();
                  },
                  false, std::move(help)};
}

void FlagSet::Int(const std::string& name, int64_t* target, std::string help) {
  flags_[name] = {[name, target](const std::string& v) {
                    int64_t i;
                    if (!absl::SimpleAtoi(v, &i)) {
                      return absl::InvalidArgumentError(
                          absl::StrCat("--", name, ": '", v, "' is not an integer"));
                    }
                    *target = i;
                    return absl::OkStatus();
                  },
                  false, std::move(help)};
}

void FlagSet::Bool(const std::string& name, bool* target, std::string help) {
  flags_[name] = {[name, target](const std::string& v) {
                    if (v.empty() || v == "true" || v == "1") {
                      *target = true;
                    } else if (v == "false" || v == "0") {
                      *target = false;
                    } else {
                      return absl::InvalidArgumentError(
                          absl::StrCat("--", name, ": '", v, "' is not true or false"));
                    }
                    return absl::OkStatus();
                  },
                  true, std::move(help)};
}

absl::Status FlagSet::Parse(const std::vector<std::string>& args) {
  std::set<std::string> seen;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(command_, ": unexpected argument '", arg, "'"));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    const auto it = flags_.find(name);
    if (it == flags_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(command_, ": unknown flag --", name));
    }
    if (!has_value && !it->second.is_switch) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(command_, ": --", name, " needs a value"));
      }
      value = args[++i];
    }
    if (absl::Status s = it->second.set(value); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(command_, ": ", s.message()));
    }
    seen.insert(name);
  }
  for (const std::string& name : required_) {
    if (!seen.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(command_, ": --", name, " is required"));
    }
  }
  return absl::OkStatus();
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("usage: ", command_, " [flags]\n");
  for (const auto& [name, flag] : flags_) {
    absl::StrAppend(&out, "  --", name, required_.count(name) ? " (required)" : "", "  ", flag.help,
                    "\n");
  }
  return out;
}

}  // namespace reckon::ctl

namespace reckon::ctl {

int ParseFlagsOrExit(FlagSet& flags, const std::vector<std::string>& args, std::ostream& out,
                     std::ostream& err) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      out << flags.Usage();
      return 0;
    }
  }
  if (absl::Status s = flags.Parse(args); !s.ok()) {
    err << s.message() << " (--help lists the flags)\n";
    return 2;
  }
  return -1;
}

}  // namespace reckon::ctl
