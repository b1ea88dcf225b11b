#include "worker/join_planner.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/stop_signals.h"

namespace reckon::worker {

using Clock = std::chrono::steady_clock;

uint64_t TotalSeqs(const server::VersionMap& map) {
  uint64_t total = 0;
  for (const auto& [origin, seq] : map) total += seq;
  return total;
}

JoinPlanner::JoinPlanner(JoinRules rules, std::string own_initial, Probe probe, std::ostream* log)
    : rules_(std::move(rules)),
      own_initial_(std::move(own_initial)),
      probe_(std::move(probe)),
      log_(log) {}

absl::Status JoinPlanner::UnlessTimedOut(Clock::time_point start, const std::string& why) const {
  if (rules_.join_timeout.count() == 0 || Clock::now() - start < rules_.join_timeout) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      absl::StrCat(why, " after ", rules_.join_timeout.count(), " s (--join-timeout-s)"));
}

absl::Status JoinPlanner::Find(const std::vector<std::string>& all_seeds,
                               const std::set<std::string>& refused, Clock::time_point start,
                               JoinSource* source) const {
  std::vector<std::string> seeds;
  for (const std::string& seed : all_seeds) {
    if (!refused.contains(seed)) seeds.push_back(seed);
  }
  auto backoff = std::chrono::milliseconds(200);
  auto last_said = start - std::chrono::hours(1);
  for (int round = 1;; ++round) {
    const SeedProbes probes = probe_(seeds);
    uint64_t best_total = 0;
    std::vector<std::string> silent;
    RECKON_RETURN_IF_ERROR(ChooseSource(seeds, probes, own_initial_, source, &best_total, &silent));
    for (const std::string& seed : refused) {
      silent.push_back(absl::StrCat(seed, " (refused: a witness contradicted its snapshot)"));
    }
    // Conclusive: someone trained (with join_after_messages, that much); or
    // nobody did and everyone said so (or we were told to bootstrap).
    const uint64_t enough = std::max<uint64_t>(1, rules_.join_after_messages);
    if (best_total >= enough) return absl::OkStatus();
    // A refused seed had trained (a witness had applied its cut): nobody
    // starts afresh after that.
    if (rules_.join_after_messages == 0 && refused.empty() &&
        (silent.empty() || rules_.bootstrap)) {
      JoinSource none;
      none.answers = std::move(source->answers);
      for (const std::string& s : silent) {
        none.answers.push_back(absl::StrCat("no answer from ", s));
      }
      *source = std::move(none);
      return absl::OkStatus();
    }
    const auto now = Clock::now();
    if (rules_.join_timeout.count() > 0 && now - start >= rules_.join_timeout) {
      return TimedOut(best_total, silent);
    }
    const std::string unanswered =
        silent.empty() ? "" : absl::StrCat(", no answer from ", absl::StrJoin(silent, ", "));
    if (now - last_said >= std::chrono::seconds(5)) {
      last_said = now;
      SayWaiting(round, best_total, unanswered);
    }
    // SIGTERM ends the wait within 100 ms (Kubernetes and systemd stop a
    // worker that waits for seeds gone for good this way).
    for (auto slept = std::chrono::milliseconds(0); slept < backoff;
         slept += std::chrono::milliseconds(100)) {
      if (Stopped()) {
        return absl::CancelledError(absl::StrCat(base::StoppedBySignal(), " while joining (round ",
                                                 round, unanswered, "); nothing trained"));
      }
      std::this_thread::sleep_for(
          std::min<std::chrono::milliseconds>(backoff - slept, std::chrono::milliseconds(100)));
    }
    // A worker waiting for the cluster joins soon after it is ready.
    backoff = std::min(2 * backoff,
                       std::chrono::milliseconds(rules_.join_after_messages > 0 ? 500 : 2000));
  }
}

void JoinPlanner::SayWaiting(int round, uint64_t best_total, const std::string& unanswered) const {
  if (log_ == nullptr) return;
  if (rules_.join_after_messages > 0) {
    *log_ << "reckon-worker: waiting to join until a seed has applied "
          << std::max<uint64_t>(1, rules_.join_after_messages)
          << " messages (the most: " << best_total << "; round " << round << unanswered
          << "): " << rules_.join_after_why << "\n"
          << std::flush;
  } else {
    *log_ << "reckon-worker: waiting for the seeds to answer (round " << round << unanswered
          << "); silence is not evidence that nobody has trained\n"
          << std::flush;
  }
}

absl::Status JoinPlanner::TimedOut(uint64_t best_total,
                                   const std::vector<std::string>& silent) const {
  const std::string no_answer =
      silent.empty() ? "" : absl::StrCat(" (no answer from ", absl::StrJoin(silent, ", "), ")");
  const std::string waiting =
      rules_.join_after_messages == 0
          ? std::string("no conclusive answer from the seeds in ")
          : absl::StrCat("no seed had applied ", std::max<uint64_t>(1, rules_.join_after_messages),
                         " messages (the most: ", best_total, ") after ");
  return absl::UnavailableError(absl::StrCat(
      waiting, rules_.join_timeout.count(), " s", no_answer, "; ",
      rules_.join_after_messages == 0
          ? "a worker starts from the seed's weights only when every seed says nobody has "
            "trained, or with --bootstrap"
          : rules_.join_after_why));
}

absl::Status JoinPlanner::ChooseSource(const std::vector<std::string>& seeds,
                                       const SeedProbes& probes, const std::string& own_initial,
                                       JoinSource* source, uint64_t* best_total,
                                       std::vector<std::string>* silent) {
  size_t best = seeds.size();
  std::vector<std::string> answers;
  for (size_t i = 0; i < seeds.size(); ++i) {
    const absl::StatusOr<server::FetchedSnapshot>& probe = probes[i];
    if (!probe.ok()) {
      const absl::StatusCode code = probe.status().code();
      if (code == absl::StatusCode::kFailedPrecondition ||
          code == absl::StatusCode::kPermissionDenied || code == absl::StatusCode::kDataLoss) {
        return absl::FailedPreconditionError(
            absl::StrCat("refused by peer ", seeds[i], ": ", probe.status().message()));
      }
      silent->push_back(absl::StrCat(seeds[i], " (", probe.status().message(), ")"));
      continue;
    }
    const uint64_t total = TotalSeqs(probe->applied);
    answers.push_back(absl::StrCat(
        seeds[i], " (", probe->header.source_node_id().substr(0, 64), ": ",
        probe->header.joining() ? std::string("joining") : absl::StrCat(total, " messages applied"),
        ")"));
    if (total > *best_total) {
      *best_total = total;
      best = i;
    }
  }
  *source = JoinSource{};
  source->answers = std::move(answers);
  if (best < seeds.size()) {
    source->address = seeds[best];
    // The witnesses: the other seeds that answered and are members (not
    // joining themselves), another node than the source.
    const std::string& source_id = probes[best]->header.source_node_id();
    for (size_t i = 0; i < seeds.size(); ++i) {
      if (i == best || !probes[i].ok() || probes[i]->header.joining() ||
          probes[i]->header.source_node_id() == source_id) {
        continue;
      }
      source->witnesses.push_back(seeds[i]);
    }
    if (MayJoinByReplay(own_initial, best, probes)) {
      source->replay_cut = probes[best]->applied;
      source->replay_bytes = probes[best]->header.replay_bytes();
    }
  }
  return absl::OkStatus();
}

bool JoinPlanner::MayJoinByReplay(const std::string& own_initial, size_t source,
                                  const SeedProbes& probes) {
  if (own_initial.empty() || source >= probes.size() || !probes[source].ok()) return false;
  const v1::SnapshotChunk::Header& header = probes[source]->header;
  if (header.replay_bytes() == 0 || header.initial_sha256() != own_initial) return false;
  for (const absl::StatusOr<server::FetchedSnapshot>& probe : probes) {
    if (!probe.ok() || probe->header.joining() || probe->header.initial_sha256().empty()) continue;
    if (probe->header.initial_sha256() != own_initial) return false;
  }
  return true;
}

}  // namespace reckon::worker
