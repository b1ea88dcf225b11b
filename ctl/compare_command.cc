// reckonctl compare: the same cluster once per codec (same seed, shards and
// recipe: every other flag goes to every worker unchanged), plus one dense
// worker alone as the baseline, and a table of what each costs and reaches.
// Each cluster is a `reckonctl local` run of this binary, so compare measures
// exactly what users run.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/flags.h"
#include "base/json.h"
#include "base/process.h"
#include "base/status_macros.h"
#include "base/stop_signals.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"
#include "ctl/worker_summary.h"

ABSL_FLAG(std::string, codecs, "threshold,onebit,dyntree8,dense", "compare: codecs to run");
ABSL_FLAG(std::string, csv, "", "compare: also write the table here as CSV");
ABSL_FLAG(int64_t, repeats, 1,
          "compare: run each cluster this many times and report the mean accuracy and its range "
          "(asynchronous runs differ with the interleaving of messages)");
ABSL_FLAG(std::string, chart, "",
          "compare: draw test accuracy against bytes on the wire here (SVG, gnuplot)");
ABSL_DECLARE_FLAG(int64_t, workers);
ABSL_DECLARE_FLAG(std::string, work_dir);
ABSL_DECLARE_FLAG(int64_t, timeout_s);
ABSL_DECLARE_FLAG(std::string, link);
ABSL_DECLARE_FLAG(int64_t, link_mtu);

namespace reckon::ctl {
namespace {

struct CompareRow {
  std::string codec;
  int workers = 0;
  double bits_per_param = 0, wire_bytes = 0, compression = 0, accuracy = 0, samples_per_s = 0,
         wall_s = 0;
  // Over the runs of this row (accuracy, samples/s, wall and bytes are means).
  double accuracy_min = 0, accuracy_max = 0;
  int runs = 1;
  std::string hash_note;
};

// The mean of `runs` (one codec), with the accuracy's range; replicas are
// "identical" only when they were in every run.
CompareRow MeanOf(const std::vector<CompareRow>& runs) {
  CompareRow m = runs.front();
  m.runs = static_cast<int>(runs.size());
  m.accuracy_min = m.accuracy_max = runs.front().accuracy;
  double bytes = 0, accuracy = 0, rate = 0, wall = 0;
  for (const CompareRow& r : runs) {
    bytes += r.wire_bytes;
    accuracy += r.accuracy;
    rate += r.samples_per_s;
    wall += r.wall_s;
    m.accuracy_min = std::min(m.accuracy_min, r.accuracy);
    m.accuracy_max = std::max(m.accuracy_max, r.accuracy);
    if (r.hash_note != "identical") m.hash_note = r.hash_note;
  }
  const double n = static_cast<double>(runs.size());
  m.wire_bytes = bytes / n;
  m.accuracy = accuracy / n;
  m.samples_per_s = rate / n;
  m.wall_s = wall / n;
  return m;
}

// Runs `reckonctl local` for one codec and reads its summary. kCancelled
// when it was stopped by a signal.
// Run `run` (from 1) of it is in <dir>/<codec> for the first, <dir>/<codec>-<run> after.
absl::StatusOr<CompareRow> RunCluster(const std::string& codec, int run, int workers,
                               const std::string& dir, int64_t timeout_s,
                               const std::vector<std::string>& training) {
  const std::string name = run == 1 ? codec : absl::StrCat(codec, "-", run);
  const std::string summary = dir + "/" + name + ".json";
  std::vector<std::string> args = {
      "local", "--workers",   std::to_string(workers),  "--codec",
      codec,   "--work-dir",  dir + "/" + name,         "--summary-json",
      summary, "--timeout-s", std::to_string(timeout_s)};
  args.insert(args.end(), training.begin(), training.end());
  RECKON_ASSIGN_OR_RETURN(
      base::ChildProcess p,
      base::ChildProcess::Spawn("/proc/self/exe", args, dir + "/" + name + ".log",
                                dir + "/" + name + ".log"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s + 120);
  std::optional<int> code;
  bool told = false;
  while (!(code = p.Wait(std::chrono::milliseconds(200))) &&
         std::chrono::steady_clock::now() < deadline) {
    if (base::StopFlag().load() && !told) {
      p.Signal(SIGTERM);
      told = true;
    }
  }
  if (base::StopFlag().load() || (code && *code == kExitStopped)) {
    if (!code) code = p.Wait(std::chrono::seconds(60));
    return absl::CancelledError(absl::StrCat(base::StoppedBySignal(), " during the ", name,
                                             " cluster (its log: ", dir, "/", name, ".log)"));
  }
  if (!code || *code != 0) {
    absl::StatusOr<std::string> log = base::ReadFile(dir + "/" + name + ".log", 1 << 16);
    return absl::UnavailableError(
        absl::StrCat("the ", name, " cluster failed:\n", log.ok() ? *log : std::string()));
  }
  RECKON_ASSIGN_OR_RETURN(base::Json j, base::ReadJsonFile(summary));
  CompareRow r;
  r.codec = codec;
  r.workers = workers;
  r.wire_bytes = j.at("wire_bytes");
  r.compression = j.at("compression_ratio");
  r.bits_per_param = r.compression > 0 ? 32.0 / r.compression : 0;
  r.accuracy = j.at("test_accuracy");
  r.samples_per_s = j.at("samples_per_s");
  r.wall_s = j.at("wall_seconds");
  r.hash_note = j.at("hashes_equal") == true ? "identical" : "DIFFER";
  r.accuracy_min = r.accuracy_max = r.accuracy;
  return r;
}

// The dense worker alone (RunDenseBaseline) as a row of the table.
absl::StatusOr<CompareRow> RunBaseline(const std::string& dir, int64_t timeout_s,
                                const std::vector<std::string>& training) {
  const std::string worker = FindWorkerBinary();
  if (worker.empty()) return absl::NotFoundError("cannot find reckon-worker beside reckonctl");
  const auto start = std::chrono::steady_clock::now();
  RECKON_ASSIGN_OR_RETURN(const WorkerSummary w,
                          RunDenseBaseline(worker, dir, training, timeout_s));
  CompareRow r;
  r.codec = "dense alone";
  r.workers = 1;
  r.wire_bytes = w.wire_bytes;
  r.compression = w.compression_ratio;
  r.bits_per_param = r.compression > 0 ? 32.0 / r.compression : 0;
  r.accuracy = w.test_accuracy;
  r.samples_per_s = w.samples_per_s;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.hash_note = "-";
  r.accuracy_min = r.accuracy_max = r.accuracy;
  return r;
}

absl::Status WriteChart(const std::vector<CompareRow>& rows, const std::string& dir,
                        const std::string& svg) {
  if (!std::filesystem::exists("/usr/bin/gnuplot")) {
    return absl::FailedPreconditionError("--chart needs gnuplot: apt-get install gnuplot-nox");
  }
  const std::string data = dir + "/chart.dat", script = dir + "/chart.gp";
  std::string points;
  for (const CompareRow& r : rows) {
    points += absl::StrFormat("\"%s\" %.6g %.4f\n", r.codec, r.wire_bytes, 100 * r.accuracy);
  }
  RECKON_RETURN_IF_ERROR(base::WriteFileAtomically(data, points));
  RECKON_RETURN_IF_ERROR(base::WriteFileAtomically(
      script,
      absl::StrFormat(
          "set terminal svg size 720,440 dynamic font 'sans,12'\n"
          "set output '%s'\n"
          "set title 'reckon: test accuracy against bytes on the wire'\n"
          "set xlabel 'bytes sent by all origins (log scale)'\n"
          "set ylabel 'test accuracy (%%)'\n"
          "set logscale x\nset grid\nset key off\nset offsets graph 0.08, graph 0.25, 0.5, 0.5\n"
          "plot '%s' using 2:3 with points pt 7 ps 1.2, '' using 2:3:1 with labels offset 0,1\n",
          svg, data)));
  RECKON_ASSIGN_OR_RETURN(base::ChildProcess p,
                          base::ChildProcess::Spawn("/usr/bin/gnuplot", {script},
                                                    dir + "/gnuplot.log", dir + "/gnuplot.log"));
  const std::optional<int> code = p.Wait(std::chrono::seconds(60));
  if (!code || *code != 0) {
    return absl::UnavailableError(absl::StrCat("gnuplot failed; see ", dir, "/gnuplot.log"));
  }
  return absl::OkStatus();
}

// The table on `out`, and --csv / --chart when asked.
int Report(const std::vector<CompareRow>& rows, const std::string& dir, std::ostream& out,
           std::ostream& err) {
  const CompareRow& baseline = rows.back();
  out << absl::StrFormat("\n%-12s %7s %9s %14s %10s %9s %13s %8s %11s %8s %10s\n", "codec",
                         "workers", "bits/par", "wire bytes", "vs dense", "accuracy", "range",
                         "vs base", "samples/s", "wall s", "replicas");
  std::string csv =
      "codec,workers,bits_per_param_per_step,wire_bytes,compression_vs_dense_fp32,test_accuracy,"
      "test_accuracy_min,test_accuracy_max,runs,accuracy_points_vs_baseline,samples_per_s,"
      "wall_seconds,replicas\n";
  bool all_identical = true;
  for (const CompareRow& r : rows) {
    const double points = 100 * (r.accuracy - baseline.accuracy);
    const std::string range =
        r.runs > 1 ? absl::StrFormat("%.2f-%.2f", 100 * r.accuracy_min, 100 * r.accuracy_max) : "-";
    out << absl::StrFormat("%-12s %7d %9.3f %14.0f %9.1fx %8.2f%% %13s %+8.2f %11.0f %8.1f %10s\n",
                           r.codec, r.workers, r.bits_per_param, r.wire_bytes, r.compression,
                           100 * r.accuracy, range, points, r.samples_per_s, r.wall_s, r.hash_note);
    csv += absl::StrFormat("%s,%d,%.6g,%.0f,%.6g,%.6g,%.6g,%.6g,%d,%.4f,%.0f,%.3f,%s\n", r.codec,
                           r.workers, r.bits_per_param, r.wire_bytes, r.compression, r.accuracy,
                           r.accuracy_min, r.accuracy_max, r.runs, points, r.samples_per_s,
                           r.wall_s, r.hash_note);
    all_identical = all_identical && r.hash_note != "DIFFER";
  }
  if (rows.size() > 1 && rows.front().runs > 1) {
    out << "accuracy: the mean of " << rows.front().runs
        << " runs per cluster and their range (the worker alone is deterministic: one run)\n";
  }
  out << "wire bytes: what the origins sent (each message once; a full mesh of N sends it N-1 "
         "times)\n";
  if (const std::string path = absl::GetFlag(FLAGS_csv); !path.empty()) {
    if (absl::Status s = base::WriteFileAtomically(path, csv); !s.ok()) {
      err << "reckonctl compare: " << s.message() << "\n";
      return kExitFailed;
    }
  }
  if (const std::string svg = absl::GetFlag(FLAGS_chart); !svg.empty()) {
    if (absl::Status s = WriteChart(rows, dir, svg); !s.ok()) {
      err << "reckonctl compare: " << s.message() << "\n";
      return kExitFailed;
    }
    out << "chart: " << svg << "\n";
  }
  if (!all_identical) {
    err << "reckonctl compare: a cluster's replicas differ\n";
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

int RunCompareCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{
      "reckonctl compare",
      {{"codecs"}, {"workers"}, {"repeats"}, {"csv"}, {"chart"}, {"work_dir"}, {"timeout_s"},
       {"link"}, {"link_mtu"}}};
  std::vector<std::string> training;
  if (int code = base::ParseFlagsOrExit(scope, args, out, err, &training); code >= 0) return code;
  const int64_t workers = absl::GetFlag(FLAGS_workers);
  if (workers < 1 || workers > 64) {
    err << "reckonctl compare: --workers takes a number from 1 to 64\n";
    return kExitUsage;
  }
  const int64_t repeats = absl::GetFlag(FLAGS_repeats);
  if (repeats < 1 || repeats > 100) {
    err << "reckonctl compare: --repeats takes a number from 1 to 100\n";
    return kExitUsage;
  }
  std::vector<std::string> codecs =
      absl::StrSplit(absl::GetFlag(FLAGS_codecs), ',', absl::SkipEmpty());
  for (const std::string& c : codecs) {
    if (c != "threshold" && c != "onebit" && c != "dyntree8" && c != "dense") {
      err << "reckonctl compare: --codecs takes threshold, onebit, dyntree8, dense; not '" << c
          << "'\n";
      return kExitUsage;
    }
  }
  for (const std::string& f : training) {
    if (f.rfind("--codec", 0) == 0 && f.rfind("--codecs", 0) != 0) {
      err << "reckonctl compare: --codec is set by compare for each run (use --codecs)\n";
      return kExitUsage;
    }
  }
  std::string dir = absl::GetFlag(FLAGS_work_dir);
  if (dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "reckon-compare-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      err << "reckonctl compare: cannot create a work directory in /tmp\n";
      return kExitFailed;
    }
    dir = tmpl;
  }
  std::filesystem::create_directories(dir);
  const int64_t timeout_s = absl::GetFlag(FLAGS_timeout_s);
  // The clusters run behind --link (checked by local); the worker alone needs no network.
  std::vector<std::string> cluster_flags = training;
  if (const std::string link = absl::GetFlag(FLAGS_link); !link.empty()) {
    cluster_flags.insert(cluster_flags.end(), {"--link", link, "--link-mtu",
                                               std::to_string(absl::GetFlag(FLAGS_link_mtu))});
    out << "compare: every cluster's workers behind links " << link << "\n";
  }
  // SIGINT or SIGTERM to compare: the cluster running is stopped (its
  // `reckonctl local` stops its workers) and compare exits kExitStopped, as
  // local and the workers do. Ctrl-C reaches the whole group anyway; a
  // signal to compare alone is passed on (RunCluster).
  base::CatchStopSignals();
  std::vector<CompareRow> rows;
  for (const std::string& codec : codecs) {
    std::vector<CompareRow> runs;
    for (int run = 1; run <= repeats; ++run) {
      out << "compare: " << codec << ", " << workers << " workers";
      if (repeats > 1) out << ", run " << run << " of " << repeats;
      out << "...\n" << std::flush;
      absl::StatusOr<CompareRow> r = RunCluster(codec, run, int(workers), dir, timeout_s, cluster_flags);
      if (!r.ok()) {
        err << "reckonctl compare: " << r.status().message() << "\n";
        return r.status().code() == absl::StatusCode::kCancelled ? kExitStopped : kExitFailed;
      }
      runs.push_back(*r);
    }
    rows.push_back(MeanOf(runs));
  }
  out << "compare: the baseline, one dense worker alone...\n" << std::flush;
  if (base::StopFlag().load()) {
    err << "reckonctl compare: " << base::StoppedBySignal() << " before the baseline\n";
    return kExitStopped;
  }
  absl::StatusOr<CompareRow> baseline = RunBaseline(dir, timeout_s, training);
  if (!baseline.ok()) {
    err << "reckonctl compare: " << baseline.status().message() << "\n";
    return kExitFailed;
  }
  rows.push_back(*baseline);
  return Report(rows, dir, out, err);
}

}  // namespace reckon::ctl
