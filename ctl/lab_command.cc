// reckonctl lab --workers N [--link SHAPE] [--link-mtu M]: the network lab
// (ctl/net_lab.h) for a program that is not C++, such as the chaos soak
// (tests/chaos/soak.py). It makes one network namespace per worker and runs
// the switch between them until stdin ends (or SIGINT/SIGTERM), then tears
// everything down. The caller starts its workers with the `exec` prefix of
// each, and steers the switch with one command a line on stdin:
//
//   partition 0,1 2,3     groups of worker indices, separated by spaces:
//                         packets between groups vanish; a worker in no
//                         group is cut from all
//   heal                  ends the partition
//   shape SHAPE           every packet between workers from now on
//   counters              the switch's counters, as one JSON line
//   quit                  tear down and exit 0
//
// Output (stdout), one JSON object a line: first the lab
// {"workers": N, "ip": [...], "netns": [...], "exec": [[...], ...],
//  "host_ip": "10.213.S.254"}, then one answer per command: {"ok": "..."}
// or {"error": "..."} naming what is wrong (a bad command does not end the
// lab). The caller's own process reaches every worker's address through the
// host side, never impaired and never partitioned.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/stop_signals.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"
#include "ctl/net_lab.h"

namespace reckon::ctl {
namespace {

// "0,1 2,3" -> {{0,1},{2,3}}; the error names the bad part.
absl::StatusOr<std::vector<std::vector<int>>> ParseGroups(absl::string_view text, int workers) {
  std::vector<std::vector<int>> groups;
  std::vector<bool> seen(workers, false);
  for (absl::string_view group_text : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    std::vector<int>& group = groups.emplace_back();
    for (absl::string_view index_text : absl::StrSplit(group_text, ',', absl::SkipEmpty())) {
      int index = -1;
      if (!absl::SimpleAtoi(index_text, &index) || index < 0 || index >= workers) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", index_text, "' is not a worker index (0 to ", workers - 1, ")"));
      }
      if (seen[index]) {
        return absl::InvalidArgumentError(absl::StrCat("worker ", index, " is in two groups"));
      }
      seen[index] = true;
      group.push_back(index);
    }
  }
  if (groups.empty()) {
    return absl::InvalidArgumentError("partition needs groups, e.g. 'partition 0,1 2,3'");
  }
  return groups;
}

// One command line; the answer's JSON.
base::Json Answer(NetLab& lab, absl::string_view line, bool* quit) {
  line = absl::StripAsciiWhitespace(line);
  const size_t space = line.find(' ');
  const absl::string_view verb = line.substr(0, space);
  const absl::string_view rest =
      space == absl::string_view::npos ? "" : absl::StripAsciiWhitespace(line.substr(space));
  base::Json answer;
  if (verb == "partition") {
    absl::StatusOr<std::vector<std::vector<int>>> groups = ParseGroups(rest, lab.size());
    if (!groups.ok()) {
      answer["error"] = std::string(groups.status().message());
    } else {
      lab.Partition(*groups);
      answer["ok"] = absl::StrCat("partition ", rest);
    }
  } else if (verb == "heal") {
    lab.Heal();
    answer["ok"] = "healed";
  } else if (verb == "shape") {
    absl::StatusOr<LinkShape> shape = ParseLinkShape(std::string(rest));
    if (!shape.ok()) {
      answer["error"] = std::string(shape.status().message());
    } else {
      lab.Shape(*shape);
      answer["ok"] = absl::StrCat("shape ", LinkShapeText(*shape));
    }
  } else if (verb == "counters") {
    const NetLab::Counters c = lab.counters();
    answer = {{"forwarded", c.forwarded}, {"lost", c.lost}, {"duplicated", c.duplicated},
              {"reordered", c.reordered}, {"cut", c.cut},   {"overflowed", c.overflowed},
              {"bytes", c.bytes}};
  } else if (verb == "quit") {
    *quit = true;
    answer["ok"] = "quit";
  } else {
    answer["error"] = absl::StrCat("unknown command '", verb,
                                   "' (known: partition, heal, shape, counters, quit)");
  }
  return answer;
}

}  // namespace

int RunLabCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl lab", {{"workers"}, {"link"}, {"link_mtu"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  const int64_t workers = absl::GetFlag(FLAGS_workers);
  if (workers < 1 || workers > 250) {
    err << "reckonctl lab: --workers takes a number from 1 to 250\n";
    return kExitUsage;
  }
  LinkShape shape;
  if (const std::string link = absl::GetFlag(FLAGS_link); !link.empty()) {
    absl::StatusOr<LinkShape> parsed = ParseLinkShape(link);
    if (!parsed.ok()) {
      err << "reckonctl lab: --link: " << parsed.status().message() << "\n";
      return kExitUsage;
    }
    shape = *parsed;
  }
  const int64_t mtu = absl::GetFlag(FLAGS_link_mtu);
  if (mtu < 576 || mtu > 65535) {
    err << "reckonctl lab: --link-mtu takes 576 to 65535\n";
    return kExitUsage;
  }
  absl::StatusOr<std::unique_ptr<NetLab>> made =
      NetLab::Create(static_cast<int>(workers), static_cast<int>(mtu));
  if (!made.ok()) {
    err << "reckonctl lab: " << made.status().message() << "\n";
    return kExitFailed;
  }
  NetLab& lab = **made;
  lab.Shape(shape);

  base::CatchStopSignals();
  signal(SIGPIPE, SIG_IGN);  // a caller gone: stdin ends too, and the lab is torn down

  base::Json description = {{"workers", workers}};
  for (int i = 0; i < lab.size(); ++i) {
    description["ip"].push_back(lab.ip(i));
    description["netns"].push_back(lab.netns(i));
    description["exec"].push_back(lab.Exec(i));
  }
  description["host_ip"] = lab.host_ip();
  description["link"] = LinkShapeText(shape);
  out << description.dump() << "\n" << std::flush;

  // Commands until stdin ends; polled, so that a signal ends the wait.
  std::string pending;
  bool quit = false;
  while (!quit && !base::StopFlag().load()) {
    pollfd in{STDIN_FILENO, POLLIN, 0};
    if (poll(&in, 1, 200) <= 0) continue;
    char buffer[4096];
    const ssize_t n = read(STDIN_FILENO, buffer, sizeof buffer);
    if (n <= 0) break;  // EOF: the caller is done (or gone)
    pending.append(buffer, static_cast<size_t>(n));
    if (pending.size() > (1 << 16)) {
      err << "reckonctl lab: a command line longer than 64 KiB; stopping\n";
      return kExitFailed;
    }
    for (size_t newline; !quit && (newline = pending.find('\n')) != std::string::npos;) {
      const std::string line = pending.substr(0, newline);
      pending.erase(0, newline + 1);
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      out << Answer(lab, line, &quit).dump() << "\n" << std::flush;
    }
  }
  return kExitOk;  // the lab's destructor deletes the namespaces
}

}  // namespace reckon::ctl
