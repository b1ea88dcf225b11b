// Drives the real reckonctl binary as a separate process, through files, the
// way a user does.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "codec/fixed_point.h"
#include "codec/quantizer.h"
#include "codec/update_message.h"
#include "codec/update_words.h"
#include "tests/test_process.h"

namespace reckon {
namespace {

namespace fs = std::filesystem;

using Result = ::reckon::testing::ProcessResult;
using ::reckon::testing::ReadWholeFile;

class ReckonctlCodec : public ::testing::Test {
 protected:
  Result Run(std::vector<std::string> args) {
    return ::reckon::testing::RunProcess(RECKONCTL_PATH, std::move(args), dir_.path());
  }

  fs::path Write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

  static std::string FloatBytes(const std::vector<float>& v) {
    std::string s(v.size() * 4, '\0');
    if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
    return s;
  }

  // Exactly one line on stderr, nothing on stdout, the given exit code.
  static void ExpectCleanFailure(const Result& r, int code, const std::string& mentions) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(mentions), std::string::npos) << r.err;
  }

  ::reckon::testing::ScratchDir dir_;
};

TEST_F(ReckonctlCodec, EncodeDecodeInspectRoundTrip) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.004f);
  std::vector<float> residual(100'000);
  for (float& r : residual) r = normal(rng);
  const fs::path in = Write("r.f32", FloatBytes(residual));

  for (const std::string format : {"rice", "packed32"}) {
    const fs::path msg = dir_ / ("u_" + format + ".pb"), r2 = dir_ / ("r2_" + format + ".f32");
    Result enc = Run({"codec", "encode", "--input", in, "--threshold", "0.01", "--format", format,
                      "--output", msg, "--residual-out", r2});
    ASSERT_EQ(enc.exit_code, 0) << enc.err;

    // What the library says the same input must produce.
    std::vector<float> expected_residual = residual;
    std::vector<uint32_t> expected;
    const codec::ThresholdStep step = *codec::MakeThresholdStep(0.01, 32);
    ASSERT_TRUE(codec::QuantizeResidual(expected_residual, step, &expected).ok());
    ASSERT_GT(expected.size(), 100u);
    EXPECT_EQ(ReadWholeFile(r2), FloatBytes(expected_residual));

    Result dec = Run({"codec", "decode", "--input", msg});
    ASSERT_EQ(dec.exit_code, 0) << dec.err;
    std::string want;
    for (const uint32_t w : expected) {
      want +=
          std::to_string(codec::UpdateIndex(w)) + (codec::UpdateIsNegative(w) ? " -\n" : " +\n");
    }
    EXPECT_EQ(dec.out, want);
    EXPECT_EQ(dec.err, "");

    Result ins = Run({"codec", "inspect", "--input", msg});
    ASSERT_EQ(ins.exit_code, 0) << ins.err;
    EXPECT_NE(ins.out.find("count:                " + std::to_string(expected.size())),
              std::string::npos)
        << ins.out;
    EXPECT_NE(ins.out.find("param_count:          100000"), std::string::npos);
    EXPECT_NE(ins.out.find(format == "rice" ? "CODEC_THRESHOLD_RICE" : "CODEC_THRESHOLD_PACKED32"),
              std::string::npos);
    EXPECT_NE(ins.out.find("valid:                yes"), std::string::npos);
  }
}

TEST_F(ReckonctlCodec, CorruptMessagesFailCleanly) {
  std::vector<float> residual(1000, 0.0f);
  for (int i = 0; i < 1000; i += 7) residual[i] = (i % 2 ? 1.0f : -1.0f);
  const fs::path in = Write("r.f32", FloatBytes(residual));
  const fs::path msg = dir_ / "u.pb";
  ASSERT_EQ(
      Run({"codec", "encode", "--input", in, "--threshold", "0.5", "--output", msg}).exit_code, 0);
  const std::string good = ReadWholeFile(msg);
  auto parsed = codec::ParseUpdate(good);
  ASSERT_TRUE(parsed.ok());

  v1::Update flipped = *parsed;
  (*flipped.mutable_payload())[3] ^= 0x04;
  ExpectCleanFailure(
      Run({"codec", "decode", "--input", Write("crc.pb", flipped.SerializeAsString())}), 1,
      "CRC-32C mismatch");
  // inspect shows the header of a corrupt message, then fails on one line.
  Result ins = Run({"codec", "inspect", "--input", (dir_ / "crc.pb").string()});
  EXPECT_EQ(ins.exit_code, 1);
  EXPECT_NE(ins.out.find("codec:                CODEC_THRESHOLD_RICE"), std::string::npos)
      << ins.out;
  EXPECT_EQ(ins.out.find("valid:"), std::string::npos) << ins.out;
  EXPECT_EQ(std::count(ins.err.begin(), ins.err.end(), '\n'), 1) << ins.err;
  EXPECT_NE(ins.err.find("CRC-32C mismatch"), std::string::npos) << ins.err;

  v1::Update bad_k = *parsed;
  bad_k.set_rice_k(31);
  ExpectCleanFailure(Run({"codec", "decode", "--input", Write("k.pb", bad_k.SerializeAsString())}),
                     1, "rice_k 31");
  ExpectCleanFailure(
      Run({"codec", "decode", "--input", Write("junk.pb", "\x0a\xff\xff\xff\xff\x0f")}), 1,
      "not a valid reckon.v1.Update");
  ExpectCleanFailure(
      Run({"codec", "decode", "--input", Write("trunc.pb", good.substr(0, good.size() - 3))}), 1,
      "not a valid reckon.v1.Update");
}

TEST_F(ReckonctlCodec, BadFlagsAndMissingFilesFailCleanly) {
  ExpectCleanFailure(Run({"codec", "decode", "--input", (dir_ / "absent.pb").string()}), 1,
                     "absent.pb");
  ExpectCleanFailure(Run({"codec", "decode", "--inptu", "x"}), 2, "unknown flag --inptu");
  ExpectCleanFailure(Run({"codec", "decode"}), 2, "--input is required");
  const fs::path in = Write("r.f32", FloatBytes({1.0f, 2.0f}));
  ExpectCleanFailure(Run({"codec", "encode", "--input", in, "--threshold", "zero", "--output",
                          (dir_ / "o.pb").string()}),
                     2, "--threshold");
  ExpectCleanFailure(Run({"codec", "encode", "--input", in, "--threshold", "0.1", "--format",
                          "gzip", "--output", (dir_ / "o.pb").string()}),
                     2, "--format");
  ExpectCleanFailure(Run({"codec", "frobnicate"}), 2, "unknown subcommand");
  const fs::path odd = Write("odd.f32", "12345");
  ExpectCleanFailure(Run({"codec", "encode", "--input", odd, "--threshold", "0.1", "--output",
                          (dir_ / "o.pb").string()}),
                     1, "not a whole number of float32");
}

TEST_F(ReckonctlCodec, NanResidualIsRefusedAndNothingIsWritten) {
  const fs::path in = Write("r.f32", FloatBytes({0.5f, std::nanf(""), -0.5f}));
  const fs::path out = dir_ / "o.pb";
  ExpectCleanFailure(Run({"codec", "encode", "--input", in, "--threshold", "0.1", "--output", out}),
                     1, "residual element 1 is NaN");
  EXPECT_FALSE(fs::exists(out));
}

// Dettmers 2015 Table 1 for the dynamic tree: one JSON object per
// distribution. The relative errors land near the paper's (1-2.5%); the
// absolute error on U(0,1) cannot beat 1/1024, the bound for any 8-bit code,
// which the paper's 0.000043 does (docs/wire-codecs.md and docs/benchmarks.md).
TEST_F(ReckonctlCodec, DynTreeTable1PrintsEveryDistribution) {
  const Result r =
      Run({"bench", "codec", "--codec", "dyntree8", "--table1", "--json", "--draws", "200000"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> names;
  while (std::getline(lines, line)) {
    const base::Json row = base::Json::parse(line);
    names.push_back(row.at("distribution"));
    const double rel = row.at("mean_rel_error_pct"), abs_error = row.at("mean_abs_error");
    EXPECT_GT(rel, 0.5) << line;
    EXPECT_LT(rel, 3.0) << line;
    if (names.back() == "U(0,1)") {
      EXPECT_GT(abs_error, 1.0 / 1024) << line;
      EXPECT_LT(abs_error, 0.005) << line;
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"U(0,1)", "N(0,1)", "N(0,10^2)", "N(0,0.2^2)"}));
  const Result wrong = Run({"bench", "codec", "--codec", "onebit", "--table1"});
  EXPECT_EQ(wrong.exit_code, 2);
  EXPECT_NE(wrong.err.find("give --codec dyntree8"), std::string::npos) << wrong.err;
}

// A bench's --json, kept in a file, prints again as its table (docs/
// benchmarks.md quotes figures from such files): the fields asked for, the
// rows asked for, values as the JSON has them; a document's arrays of
// objects as tables under its other fields. Bad files and flags fail with
// one line.
TEST_F(ReckonctlCodec, BenchShowPrintsAKeptFiguresFileAgain) {
  const Result bench =
      Run({"bench", "codec", "--codec", "dyntree8", "--table1", "--json", "--draws", "100000"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const std::string kept = Write("table1.jsonl", bench.out).string();
  const Result shown =
      Run({"bench", "show", "--from", kept, "--columns", "distribution,mean_rel_error_pct"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  std::istringstream bench_lines(bench.out), shown_lines(shown.out);
  std::string line;
  std::getline(shown_lines, line);
  EXPECT_EQ(line.substr(0, line.find(' ')), "distribution");
  EXPECT_NE(line.find("mean_rel_error_pct"), std::string::npos);
  int rows = 0;
  while (std::getline(bench_lines, line)) {
    const base::Json row = base::Json::parse(line);
    char rel[32];
    std::snprintf(rel, sizeof(rel), "%.4g", row.at("mean_rel_error_pct").get<double>());
    std::string printed;
    ASSERT_TRUE(std::getline(shown_lines, printed));
    std::istringstream cells(printed);
    std::string name, value;
    cells >> name >> value;
    EXPECT_EQ(name, row.at("distribution").get<std::string>());
    EXPECT_EQ(value, rel) << printed;
    ++rows;
  }
  EXPECT_EQ(rows, 4);
  EXPECT_FALSE(std::getline(shown_lines, line)) << line;

  const Result one = Run({"bench", "show", "--from", kept, "--where", "distribution=N(0,1)",
                          "--columns", "distribution"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out, "distribution\nN(0,1)\n");

  const std::string document =
      Write("gpu.json",
            R"({"device": "X", "density": 0.001, "sizes": [)"
            R"({"params": 10, "m": {"a": 1.5}}, {"params": 20, "m": {"a": 0.123456}}]})")
          .string();
  const Result doc = Run({"bench", "show", "--from", document});
  ASSERT_EQ(doc.exit_code, 0) << doc.err;
  EXPECT_EQ(doc.out,
            "device: X\ndensity: 0.001\n\n"
            "table  params  m.a\n"
            "sizes  10      1.5\n"
            "sizes  20      0.1235\n");

  ExpectCleanFailure(
      Run({"bench", "show", "--from", Write("bad.jsonl", "{\"a\": 1}\n{\"a\": \n").string()}), 1,
      "line 2");
  ExpectCleanFailure(Run({"bench", "show", "--from", (dir_ / "absent.jsonl").string()}), 1,
                     "absent.jsonl");
  ExpectCleanFailure(Run({"bench", "show", "--from", Write("empty.jsonl", "\n \n").string()}), 1,
                     "holds no figures");
  ExpectCleanFailure(Run({"bench", "show", "--from", Write("array.json", "[1, 2]").string()}), 1,
                     "not a JSON object");
  // A CSV (what `reckonctl compare --csv` keeps): its first line names the
  // fields; a row of another width is refused by its line.
  const Result csv = Run({"bench", "show", "--from",
                          Write("compare.csv",
                                "codec,workers,accuracy\nthreshold,4,0.8778\n"
                                "dense alone,1,0.879\n")
                              .string(),
                          "--where", "workers=1"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out, "codec        workers  accuracy\ndense alone  1        0.879\n");
  ExpectCleanFailure(Run({"bench", "show", "--from", Write("short.csv", "a,b\n1,2\n3\n").string()}),
                     1, "line 3 has 1 fields, its header 2");
  ExpectCleanFailure(Run({"bench", "show", "--from", Write("header.csv", "a,b\n").string()}), 1,
                     "holds no figures");
  ExpectCleanFailure(
      Run({"bench", "show", "--from", Write("wide.csv", std::string(5000, ',') + "\n").string()}),
      1, "line 1 has more than 1024 fields");
  // A hostile file's nesting is refused, not followed until the stack ends.
  std::string deep;
  for (int i = 0; i < 100'000; ++i) deep += "{\"a\": ";
  deep += "1" + std::string(100'000, '}');
  ExpectCleanFailure(Run({"bench", "show", "--from", Write("deep.json", deep).string()}), 1,
                     "nested deeper than 32 levels");
  ExpectCleanFailure(Run({"bench", "show", "--from", kept, "--where", "colour=red"}), 1, "colour");
  ExpectCleanFailure(Run({"bench", "show", "--from", kept, "--where", "distribution=N(9,9)"}), 1,
                     "matches");
  ExpectCleanFailure(Run({"bench", "show", "--from", kept, "--where", "distribution"}), 2,
                     "name=value");
  ExpectCleanFailure(Run({"bench", "show"}), 2, "--from is required");
}

// `reckonctl bench inbound` runs one node against real origins over gRPC and
// reports, per size, what the node accepted: every message (the run fails
// otherwise), its rate and the CPU spent. Figures in docs/benchmarks.md.
TEST_F(ReckonctlCodec, BenchInboundReportsEverySizeItAccepted) {
  const Result r = Run({"bench", "inbound", "--json", "--origins", "2", "--messages", "2",
                        "--train-steps", "20", "--train-origins", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> runs;
  int training_rows = 0;
  while (std::getline(lines, line)) {
    const base::Json row = base::Json::parse(line);
    if (row.contains("section")) {
      // The training thread's side: step times alone and while 3 origins
      // send it a message a step each.
      ++training_rows;
      EXPECT_EQ(row.at("section"), "training") << line;
      EXPECT_EQ(row.at("origins"), 3) << line;
      EXPECT_EQ(row.at("steps"), 20) << line;
      EXPECT_EQ(row.at("params"), 669706) << line;
      const double alone = row.at("step_ms_alone"), absorbing = row.at("step_ms_absorbing");
      EXPECT_GT(alone, 0) << line;
      EXPECT_GT(absorbing, 0) << line;
      EXPECT_NEAR(double(row.at("step_ratio")), absorbing / alone, 1e-9) << line;
      EXPECT_GT(double(row.at("emitted_updates_per_step")), 0) << line;
      EXPECT_GT(int(row.at("messages_absorbed")), 0) << line;
      EXPECT_LE(int(row.at("messages_absorbed")), 60) << line;
      EXPECT_LT(double(row.at("apply_ms_per_step")) + double(row.at("publish_ms_per_step")),
                absorbing)
          << line;
      continue;
    }
    runs.push_back(absl::StrCat(std::string(row.at("size")), " ", std::string(row.at("path")), " ",
                                int(row.at("threads"))));
    EXPECT_EQ(row.at("origins"), 2) << line;
    // A worker's node keeps no mirror; a GPU worker's host applies nothing.
    const std::string path = row.at("path");
    EXPECT_EQ(bool(row.at("node_mirror")), path == "mirror") << line;
    EXPECT_EQ(std::string(row.at("drain")), path == "gpu-host" ? "take-only" : "cpu-apply") << line;
    const double messages = row.at("messages_per_s"), updates = row.at("updates_per_s");
    const double per_message = row.at("updates_per_message");
    EXPECT_GT(messages, 0) << line;
    EXPECT_NEAR(updates, messages * per_message, 1e-6 * updates) << line;
    EXPECT_GT(double(row.at("node_cpu_ms_per_message")), 0) << line;
    EXPECT_GT(double(row.at("message_bytes")), per_message) << line;  // Rice: > 8 bits an update
  }
  // Both sizes, each node (mirror, worker, gpu-host) with 1 and 2 threads
  // (and every core, where there are more than 2).
  std::vector<std::string> expected;
  for (const char* size : {"strom", "default"}) {
    for (const char* path : {"mirror", "worker", "gpu-host"}) {
      expected.push_back(absl::StrCat(size, " ", path, " 1"));
      expected.push_back(absl::StrCat(size, " ", path, " 2"));
      if (std::thread::hardware_concurrency() > 2) {
        expected.push_back(absl::StrCat(size, " ", path, " ", std::thread::hardware_concurrency()));
      }
    }
  }
  EXPECT_EQ(runs, expected);
  EXPECT_EQ(training_rows, 1);
  EXPECT_EQ(Run({"bench", "inbound", "--origins", "0"}).exit_code, 2);
  EXPECT_EQ(Run({"bench", "inbound", "--train-origins", "0"}).exit_code, 2);
}

// `bench train` of a quanta codec times its round trip's parts alone (the
// encode with feedback, the publisher's self-check, the dense apply) and
// prints their share of the worker's step; a threshold run has none.
TEST_F(ReckonctlCodec, BenchTrainTimesAQuantaCodecsRoundTrip) {
  for (const std::string codec : {"dense", "onebit", "threshold"}) {
    SCOPED_TRACE(codec);
    const Result r = Run({"bench", "train", "--codec", codec, "--layers", "64,32,10", "--batch",
                          "16", "--steps", "4", "--threads", "2", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const base::Json figures = base::Json::parse(r.out);
    const double share = figures.at("round_trip_share");
    if (codec == "threshold") {
      EXPECT_EQ(share, 0.0) << r.out;
      continue;
    }
    for (const char* part :
         {"round_trip_encode_ms", "round_trip_check_ms", "round_trip_apply_ms"}) {
      EXPECT_GT(double(figures.at(part)), 0.0) << part << ": " << r.out;
    }
    if (codec == "dense") {
      // The encode in the optimizer's pass: the pass less the writer
      // alone, never below 0 (a difference of two noisy timings).
      const double pass = figures.at("round_trip_pass_ms"),
                   writer = figures.at("round_trip_writer_ms");
      EXPECT_DOUBLE_EQ(double(figures.at("round_trip_encode_in_pass_ms")),
                       std::max(0.0, pass - writer))
          << r.out;
    }
    // (Below 1 on any real model; on this toy one, timed for 4 steps on a
    // loaded machine, the parts timed alone can outlast the step.)
    EXPECT_GT(share, 0.0) << r.out;
  }
  const Result text = Run({"bench", "train", "--codec", "dense", "--layers", "64,32,10", "--batch",
                           "16", "--steps", "4"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("round trip"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("of the worker's step (target <= 10%)"), std::string::npos) << text.out;
}

// Under RECKON_CPU_ISA the bench names the copies it timed: what a CPU
// without AVX-512, or without any vector copy, runs (codec/elementwise.h).
TEST_F(ReckonctlCodec, BenchTrainNamesTheCopiesTheCpuIsaCapAllows) {
  struct Cap {
    const char* isa;
    bool runs;  // this CPU has what the cap allows
    std::vector<std::string> copies, crcs;
  };
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  const Cap caps[] = {
      {"portable", true, {"portable"}, {"crc32 instruction", "portable tables"}},
      {"avx2",
       static_cast<bool>(__builtin_cpu_supports("avx2")),
       {"AVX2"},
       {"AVX2 VPCLMULQDQ fold", "PCLMULQDQ fold (three crc32 streams past 24 KiB)"}},
      {"avx512", avx512, {"AVX-512"}, {"AVX-512 VPCLMULQDQ fold", "AVX2 VPCLMULQDQ fold"}},
  };
  for (const Cap& cap : caps) {
    SCOPED_TRACE(cap.isa);
    if (!cap.runs) {
      std::printf("this CPU lacks what RECKON_CPU_ISA=%s allows: not checked\n", cap.isa);
      continue;
    }
    setenv("RECKON_CPU_ISA", cap.isa, 1);
    const Result r = Run({"bench", "train", "--codec", "dense", "--layers", "64,32,10", "--batch",
                          "16", "--steps", "2", "--json"});
    // bench codec names the cap on each density's row and in its text header.
    const Result codec_rows =
        Run({"bench", "codec", "--json", "--params", "20000", "--seconds", "0.01"});
    const Result codec_text = Run({"bench", "codec", "--params", "20000", "--seconds", "0.01"});
    unsetenv("RECKON_CPU_ISA");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const base::Json figures = base::Json::parse(r.out);
    EXPECT_EQ(figures.at("cpu_isa"), cap.isa) << r.out;
    ASSERT_EQ(codec_rows.exit_code, 0) << codec_rows.err;
    std::istringstream rows(codec_rows.out);
    int densities = 0;
    for (std::string line; std::getline(rows, line); ++densities) {
      EXPECT_EQ(base::Json::parse(line).at("cpu_isa"), cap.isa) << line;
    }
    EXPECT_EQ(densities, 3) << codec_rows.out;
    ASSERT_EQ(codec_text.exit_code, 0) << codec_text.err;
    EXPECT_NE(
        codec_text.out.find(std::string("vector copies up to ") + cap.isa + " (RECKON_CPU_ISA)"),
        std::string::npos)
        << codec_text.out;
    const std::string copy = figures.at("elementwise_copy"),
                      crc = figures.at("crc32c_implementation");
    EXPECT_NE(std::find(cap.copies.begin(), cap.copies.end(), copy), cap.copies.end()) << copy;
    EXPECT_NE(std::find(cap.crcs.begin(), cap.crcs.end(), crc), cap.crcs.end()) << crc;
  }
  setenv("RECKON_CPU_ISA", "sse9", 1);
  const Result bad = Run({"bench", "train", "--codec", "dense", "--steps", "2"});
  unsetenv("RECKON_CPU_ISA");
  ExpectCleanFailure(bad, 2, "RECKON_CPU_ISA=sse9: expected avx512, avx2 or portable");
}

// `reckonctl bench gpu` runs to the end on a GPU (on the H100 of
// 2026-11-22 it stopped at "ThresholdPass::Launch twice without Finish":
// its timed loop launched the pass again before finishing the last), with
// every figure positive; without one it exits 1 saying why.
TEST(ReckonctlBenchGpu, RunsToTheEndOnAGpuOrSaysWhyNot) {
  ::reckon::testing::ScratchDir dir;
  const Result r = ::reckon::testing::RunProcess(
      RECKONCTL_PATH, {"bench", "gpu", "--json", "--reps", "2"}, dir.path());
  if (r.exit_code != 0) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(r.err.find("no CUDA device") != std::string::npos ||
                r.err.find("this build has no CUDA support") != std::string::npos)
        << r.err;
    std::printf("no GPU here, so the refusal was checked: %s", r.err.c_str());
    return;
  }
  const base::Json figures = base::Json::parse(r.out);
  ASSERT_EQ(figures.at("sizes").size(), 2u) << r.out;
  for (const base::Json& size : figures.at("sizes")) {
    EXPECT_GT(double(size.at("single_pass_vs_memcpy")), 0.0) << r.out;
    EXPECT_GT(double(size.at("emitted")), 0.0) << r.out;
    EXPECT_GT(double(size.at("apply_updates_per_s")), 0.0) << r.out;
  }
  EXPECT_GT(double(figures.at("step").at("step_s")), 0.0) << r.out;
}

}  // namespace
}  // namespace reckon
