#include "ctl/gossip_figures.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace reckon::ctl {
namespace {

// Nearest rank: the smallest value with at least `p` of them at or below it.
double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * double(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

struct Arrival {
  int receivers = 0;
  double slowest_ms = 0;
};

// One summary's arrivals into `to_one` (ms) and `by_message`.
absl::Status AddArrivals(const base::Json& summary, const std::string& what,
                         std::vector<double>* to_one,
                         std::map<std::pair<std::string, uint64_t>, Arrival>* by_message) {
  if (!summary.contains("arrivals") || !summary["arrivals"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has no arrivals: was it a --synthetic worker?"));
  }
  for (const auto& [origin, list] : summary["arrivals"].items()) {
    if (!list.is_array()) return absl::InvalidArgumentError(what + ": arrivals." + origin);
    for (const base::Json& pair : list) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number() || !pair[1].is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": arrivals.", origin,
                                                       " holds something not [seq, micros]"));
      }
      const double ms = pair[1].get<double>() / 1000;
      to_one->push_back(ms);
      Arrival& a = (*by_message)[{origin, pair[0].get<uint64_t>()}];
      ++a.receivers;
      a.slowest_ms = std::max(a.slowest_ms, ms);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GossipFigures> ComputeGossipFigures(const std::vector<base::Json>& summaries) {
  GossipFigures f;
  f.nodes = static_cast<int>(summaries.size());
  if (f.nodes < 2) return absl::InvalidArgumentError("gossip figures need at least two nodes");
  std::vector<double> to_one;
  std::map<std::pair<std::string, uint64_t>, Arrival> by_message;
  double emitted = 0, wire = 0;
  for (size_t i = 0; i < summaries.size(); ++i) {
    const base::Json& s = summaries[i];
    const std::string what = absl::StrCat("summary ", i);
    double steps, wire_bytes, seconds, sent, received, cpu, rss;
    const std::pair<const char*, double*> numbers[] = {
        {"steps", &steps},        {"wire_bytes", &wire_bytes},  {"train_seconds", &seconds},
        {"bytes_sent", &sent},    {"bytes_received", &received}, {"emit_cpu_seconds", &cpu},
        {"max_rss_bytes", &rss}};
    for (const auto& [key, value] : numbers) {
      RECKON_ASSIGN_OR_RETURN(*value, base::JsonNumber(s, key, what));
    }
    const size_t arrivals_before = to_one.size();
    RECKON_RETURN_IF_ERROR(AddArrivals(s, what, &to_one, &by_message));
    const double applied = double(to_one.size() - arrivals_before);
    emitted += steps;
    wire += wire_bytes;
    f.seconds += seconds / f.nodes;
    if (seconds > 0) {
      f.cpu_cores += cpu / seconds / f.nodes;
      f.bytes_out_per_s += sent / seconds / f.nodes;
      f.bytes_in_per_s += received / seconds / f.nodes;
    }
    if (steps + applied > 0) f.cpu_us_per_message += 1e6 * cpu / (steps + applied) / f.nodes;
    f.max_rss_mb = std::max(f.max_rss_mb, rss / (1 << 20));
    if (s.contains("arrivals_dropped")) f.arrivals_dropped += s["arrivals_dropped"].get<double>();
    if (s.contains("node") && s["node"].is_object()) {
      const base::Json& node = s["node"];
      if (node.contains("overlay") && node["overlay"].is_string()) f.overlay = node["overlay"];
      if (node.contains("duplicates_dropped") && node["duplicates_dropped"].is_number()) {
        f.duplicates += node["duplicates_dropped"].get<double>();
      }
    }
  }
  f.messages_per_node = emitted / f.nodes;
  f.message_bytes = emitted > 0 ? wire / emitted : 0;
  std::vector<double> to_all;
  for (const auto& [key, a] : by_message) {
    if (a.receivers >= f.nodes - 1) to_all.push_back(a.slowest_ms);
  }
  f.messages_untimed = emitted - double(to_all.size());
  f.to_one_p50_ms = Percentile(to_one, 0.5);
  f.to_one_p99_ms = Percentile(to_one, 0.99);
  f.to_all_p50_ms = Percentile(to_all, 0.5);
  f.to_all_p99_ms = Percentile(to_all, 0.99);
  return f;
}

std::string GossipFiguresLine(const GossipFigures& f) {
  return absl::StrFormat(
      "gossip: %d nodes (%s), %.0f messages each of %.0f bytes in %.1f s; per node out %.1f KB/s, in "
      "%.1f KB/s, CPU %.0f us per message (%.2f cores), peak memory %.0f MB; emit to arrival p50 %.1f ms, "
      "p99 %.1f ms; to every node p50 %.1f ms, p99 %.1f ms; messages some node did not time (it joined after them) %.0f, duplicates dropped %.0f",
      f.nodes, f.overlay, f.messages_per_node, f.message_bytes, f.seconds, f.bytes_out_per_s / 1e3,
      f.bytes_in_per_s / 1e3, f.cpu_us_per_message, f.cpu_cores, f.max_rss_mb, f.to_one_p50_ms,
      f.to_one_p99_ms, f.to_all_p50_ms, f.to_all_p99_ms, f.messages_untimed, f.duplicates);
}

base::Json GossipFiguresJson(const GossipFigures& f) {
  return {{"nodes", f.nodes},
          {"overlay", f.overlay},
          {"messages_per_node", f.messages_per_node},
          {"message_bytes", f.message_bytes},
          {"seconds", f.seconds},
          {"bytes_out_per_s", f.bytes_out_per_s},
          {"bytes_in_per_s", f.bytes_in_per_s},
          {"cpu_us_per_message", f.cpu_us_per_message},
          {"cpu_cores", f.cpu_cores},
          {"max_rss_mb", f.max_rss_mb},
          {"to_one_p50_ms", f.to_one_p50_ms},
          {"to_one_p99_ms", f.to_one_p99_ms},
          {"to_all_p50_ms", f.to_all_p50_ms},
          {"to_all_p99_ms", f.to_all_p99_ms},
          {"messages_untimed", f.messages_untimed},
          {"arrivals_dropped", f.arrivals_dropped},
          {"duplicates", f.duplicates}};
}

}  // namespace reckon::ctl
