// The reckon-worker binary as a user runs it: flags, errors, summary JSON.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "base/json.h"
#include "base/process.h"
#include "tests/http_client.h"
#include "tests/test_process.h"
#include "worker/npy.h"

namespace {

namespace fs = std::filesystem;

using Result = ::reckon::testing::ProcessResult;
using ::reckon::testing::ReadWholeFile;

class ReckonWorker : public ::testing::Test {
 protected:
  Result Run(std::vector<std::string> args) {
    args.push_back("--http-listen=127.0.0.1:0");  // tests run side by side
    return ::reckon::testing::RunProcess(RECKON_WORKER_PATH, std::move(args), dir_.path());
  }
  ::reckon::testing::ScratchDir dir_;
};

TEST_F(ReckonWorker, ShortRunWritesAFullSummary) {
  const std::string summary = (dir_ / "summary.json").string();
  // Dashed and underscored flag names both work; values are not touched.
  Result r = Run({"--standalone", "--layers=784,32,10", "--shard=0/20", "--epochs=1",
                  "--eval-samples=1000", "--backend", "cpu", "--threshold=0.003",
                  "--summary-json=" + summary, "--data_dir", "/usr/share/datasets/fashion-mnist"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("backend cpu (OpenBLAS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 1/1"), std::string::npos) << r.out;
  absl::StatusOr<::reckon::base::Json> json = ::reckon::base::ReadJsonFile(summary);
  ASSERT_TRUE(json.ok()) << json.status();
  for (const char* key :
       {"test_accuracy", "epochs", "steps", "samples_per_s", "params", "codec", "threshold",
        "updates_sent", "wire_bytes", "dense_bytes", "compression_ratio", "weight_hash",
        "version_vector", "node", "stopped_early"}) {
    EXPECT_TRUE(json->contains(key)) << key << "\n" << json->dump();
  }
  EXPECT_EQ(json->at("params"), 25450) << json->dump();  // 784*32+32+32*10+10
  EXPECT_EQ(json->at("steps"), 30) << json->dump();      // 3000 samples / 100
  EXPECT_EQ(json->at("codec"), "threshold-rice") << json->dump();
  EXPECT_EQ(json->at("weight_hash").get<std::string>().size(), 64u) << json->dump();
}

// RECKON_CPU_ISA caps the codec's vector copies (codec/elementwise.h); the
// replica is the same bits under every cap: a machine with AVX-512 and one
// without train the same weights. A value it does not know stops the worker
// before it starts, naming it.
TEST_F(ReckonWorker, EveryCpuIsaCapTrainsTheSameWeights) {
  for (const std::string codec : {"dense", "dyntree8", "onebit"}) {
    SCOPED_TRACE(codec);
    std::vector<std::string> hashes;
    for (const char* isa : {"", "avx2", "portable"}) {
      SCOPED_TRACE(isa);
      if (*isa == '\0') {
        unsetenv("RECKON_CPU_ISA");
      } else {
        setenv("RECKON_CPU_ISA", isa, 1);
      }
      const std::string summary = (dir_ / "summary.json").string();
      const Result r = Run({"--standalone", "--layers=784,32,10", "--shard=0/60", "--epochs=1",
                            "--eval-samples=500", "--codec", codec, "--summary-json=" + summary});
      unsetenv("RECKON_CPU_ISA");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      absl::StatusOr<::reckon::base::Json> json = ::reckon::base::ReadJsonFile(summary);
      ASSERT_TRUE(json.ok()) << json.status();
      hashes.push_back(json->at("weight_hash").get<std::string>());
    }
    EXPECT_EQ(hashes[1], hashes[0]) << "avx2 against every copy the CPU has";
    EXPECT_EQ(hashes[2], hashes[0]) << "portable against every copy the CPU has";
  }
  setenv("RECKON_CPU_ISA", "avx1024", 1);
  const Result bad = Run({"--standalone", "--layers=784,32,10", "--epochs=1"});
  unsetenv("RECKON_CPU_ISA");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_EQ(bad.out, "");
  EXPECT_NE(bad.err.find("RECKON_CPU_ISA=avx1024: expected avx512, avx2 or portable"),
            std::string::npos)
      << bad.err;
}

// A user's own data (issue 35): a NumPy folder of 5 features and 3
// classes, three Gaussian blobs, one feature on a scale 1,000 times the
// others' (each feature is standardized on its own). --layers 5,32,3
// trains it; a --layers whose input width or class count disagrees with
// the files is refused naming what the files hold.
TEST_F(ReckonWorker, TrainsOnANumpyDatasetOfAnyWidthAndClassCount) {
  using ::reckon::worker::NpyBytes;
  using ::reckon::worker::NpyType;
  const fs::path data = dir_ / "data";
  fs::create_directories(data);
  std::mt19937 rng(5);
  std::normal_distribution<float> noise;
  auto write_split = [&](const std::string& split, int n) {
    std::vector<float> x(size_t(n) * 5);
    std::vector<int64_t> y(n);
    for (int i = 0; i < n; ++i) {
      y[i] = i % 3;
      for (int j = 0; j < 5; ++j) x[i * 5 + j] = noise(rng) + (j == y[i] ? 3.0f : 0.0f);
      x[i * 5 + 4] = 1000.0f * noise(rng);
    }
    std::ofstream((data / (split + "_x.npy")).string(), std::ios::binary)
        << NpyBytes(NpyType::kFloat32, {uint64_t(n), 5},
                    std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
    std::ofstream((data / (split + "_y.npy")).string(), std::ios::binary)
        << NpyBytes(NpyType::kInt64, {uint64_t(n)},
                    std::string(reinterpret_cast<const char*>(y.data()), y.size() * 8));
  };
  write_split("train", 3000);
  write_split("test", 600);
  const std::string summary = (dir_ / "summary.json").string();
  Result r = Run({"--standalone", "--data-dir", data.string(), "--layers", "5,32,3", "--epochs",
                  "5", "--summary-json", summary});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<::reckon::base::Json> json = ::reckon::base::ReadJsonFile(summary);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->at("params"), 5 * 32 + 32 + 32 * 3 + 3) << json->dump();
  EXPECT_GT(double(json->at("test_accuracy")), 0.9) << json->dump();
  // Read into memory instead of mapped (samples.h): the same run, bit for bit.
  const std::string whole = (dir_ / "in_memory.json").string();
  r = Run({"--standalone", "--data-dir", data.string(), "--layers", "5,32,3", "--epochs", "5",
           "--summary-json", whole, "--data-in-memory"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  absl::StatusOr<::reckon::base::Json> in_memory = ::reckon::base::ReadJsonFile(whole);
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  EXPECT_EQ(in_memory->at("weight_hash"), json->at("weight_hash"));
  EXPECT_EQ(in_memory->at("test_loss"), json->at("test_loss"));

  r = Run({"--standalone", "--data-dir", data.string(), "--epochs", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("the model takes 784 inputs (--layers) but " + data.string() +
                       " has 5 features a sample: give --layers 5,...,CLASSES"),
            std::string::npos)
      << r.err;
  r = Run({"--standalone", "--data-dir", data.string(), "--layers", "5,32,2", "--epochs", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find((data / "train_y.npy").string() +
                       ": label 2 of sample 2 is outside [0, 2) (the model, --layers, has 2 "
                       "classes)"),
            std::string::npos)
      << r.err;
}

// --recipe stands where it is written for its flags: the recipe's apply
// (sigmoid, pre-training), flags after it win (a smaller network, fewer
// samples), and the log says what the recipe set.
TEST_F(ReckonWorker, RecipeSetsItsFlagsAndLaterFlagsWin) {
  const std::string summary = (dir_ / "summary.json").string();
  Result r = Run({"--standalone", "--recipe", "strom2015", "--layers=784,32,32,10",
                  "--pretrain-samples=500", "--shard=0/20", "--max-steps=20", "--eval-samples=500",
                  "--backend=cpu", "--summary-json=" + summary});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("reckon-worker: --recipe strom2015: --layers=784,1800,1800,1800,1800,1800,"
                       "10 --activation=sigmoid"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("pre-training stage 2 of 2 (784,32,32,10/sigmoid): 500 samples"),
            std::string::npos)
      << r.out;
  absl::StatusOr<::reckon::base::Json> json = ::reckon::base::ReadJsonFile(summary);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)["model"], "784,32,32,10/sigmoid");
  EXPECT_EQ((*json)["pretrained"], true);
  EXPECT_EQ((*json)["steps"], 20);
}

// --help as Abseil's and torchrun's users expect: every flag under a
// heading (none left in "Other"), the test-only fault injection only under
// --helpfull, and the hidden flags still taken.
TEST_F(ReckonWorker, HelpIsGroupedAndTheFaultFlagsOnlyInHelpfull) {
  const Result help = Run({"--help"});
  ASSERT_EQ(help.exit_code, 0) << help.out;
  for (const char* heading : {"Model and optimizer:\n", "Data:\n", "Cluster:\n", "Security:\n",
                              "Observability:\n", "Any command:\n"}) {
    EXPECT_NE(help.out.find(heading), std::string::npos) << heading << "\n" << help.out;
  }
  EXPECT_EQ(help.out.find("Other:"), std::string::npos) << "a flag in no group\n" << help.out;
  EXPECT_EQ(help.out.find("--fault-"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--helpfull lists the Testing (fault injection) flags too"),
            std::string::npos)
      << help.out;
  const Result full = Run({"--helpfull"});
  ASSERT_EQ(full.exit_code, 0) << full.out;
  EXPECT_NE(full.out.find("Testing (fault injection):\n  --fault-corrupt-weight-at-step"),
            std::string::npos)
      << full.out;
}

TEST_F(ReckonWorker, BadFlagsAndMissingDataFailClearly) {
  // Usage errors: exit 2 and a line naming the flag and what is wrong.
  const std::vector<std::pair<std::vector<std::string>, std::string>> usage_errors = {
      {{"--layers=784,x,10"}, "'x' is not a layer width"},
      {{"--codec=gzip"}, "--codec 'gzip'"},
      {{"--shard=3/3"}, "--shard '3/3'"},
      {{"--backend=tpu"}, "--backend 'tpu'"},
      {{"--adagrad-placement=aggregate"},
       "--adagrad-placement aggregate needs --optimizer adagrad"},
      {{"--optimizer=adagrad", "--adagrad-placement=global"},
       "--adagrad-placement 'global' is not local or aggregate"},
      {{"--auto-batch=100,50"}, "--auto-batch '100,50': the sizes must be strictly ascending"},
      {{"--auto-batch=100,200", "--auto-batch-samples=10"},
       "--auto-batch-samples 10 must be at least the largest candidate (200)"},
      {{"--auto-batch=100,x"}, "'x' is not a batch size >= 1"},
      // Gossip flags are checked for a worker that gossips (a standalone one has no peers).
      {{"--node-id=a", "--listen=127.0.0.1:0", "--peers=127.0.0.1:1", "--max-backlog-mb=-1"},
       "--max-backlog-mb must be from 0 (automatic) to --log-cap-mb"},
      {{"--node-id=a", "--listen=127.0.0.1:0", "--peers=127.0.0.1:1", "--max-backlog-mb=300",
        "--log-cap-mb=256"},
       "--max-backlog-mb must be from 0 (automatic) to --log-cap-mb"},
      {{"--node-id=a", "--listen=127.0.0.1:0", "--peers=127.0.0.1:1", "--stream-window-mb=0"},
       "--stream-window-mb must be from 1 to 1024"},
      {{"--node-id=a", "--listen=127.0.0.1:0", "--peers=127.0.0.1:1", "--snapshot-stripes=17"},
       "--snapshot-stripes must be from 1 to 16"},
      {{"--standalone", "--warmup-batch=10", "--warmup-fraction=1.5"},
       "--warmup-batch must be >= 0 and --warmup-fraction in (0, 1]"},
      {{"--standalone", "--pretrain-samples=-5"}, "--pretrain-samples must be >= 0"},
      {{"--recipe=strom"}, "--recipe 'strom' is not one of default, strom2015"},
      {{"--shard=0/3", "--start-workers=4"},
       "--start-workers 4 must be from 0 (all) to the shards' 3"},
      {{"--layers=784,10", "--pretrain-samples=600"},
       "--pretrain-samples: the model 784,10/relu has no hidden layer to pre-train"},
      {{"--node-id=a", "--listen=127.0.0.1:0", "--peers=127.0.0.1:1", "--stream-lanes=17"},
       "--stream-lanes must be from 0 to 16"},
      {{"--node-id=a", "--listen=127.0.0.1:0", "--peers=127.0.0.1:1", "--receive-threads=65"},
       "--receive-threads must be from 0 (one per core) to 64"},
      {{"--node-id=a", "--listen=127.0.0.1:0", "--peers=127.0.0.1:1", "--gossip-overlay=star"},
       "--gossip-overlay 'star' is not mesh or tree"},
      // Contradictory: a standalone worker has no peers (it ignored them before).
      {{"--peers=127.0.0.1:1"}, "--standalone trains alone: not with --peers"},
      // ... nor with what only a member has (each was ignored).
      {{"--cluster-token=t"}, "--standalone trains alone: not with --cluster-token"},
      {{"--advertise=h:1"}, "--standalone trains alone: not with --advertise"},
      {{"--tls-ca=x"}, "--standalone trains alone: not with --tls-ca"},
      // --synthetic (a member that emits random messages) and its flags.
      {{"--synthetic"}, "--synthetic is a member of a cluster: not with --standalone"},
      {{"--node-id=a", "--synthetic", "--synthetic-updates=0"},
       "--synthetic-updates 0 must be from 1 to the model's 669706 parameters"},
      {{"--node-id=a", "--synthetic", "--layers=4,2", "--synthetic-updates=11"},
       "--synthetic-updates 11 must be from 1 to the model's 10 parameters"},
      {{"--node-id=a", "--synthetic", "--synthetic-rate=-1"}, "--synthetic-rate must be from 0"},
      {{"--node-id=a", "--synthetic", "--codec=dense"}, "--synthetic emits threshold messages"},
      {{"--node-id=a", "--synthetic", "--after-training=serve"},
       "--after-training serve is for training workers"},
  };
  Result r;
  for (const auto& [flags, message] : usage_errors) {
    std::vector<std::string> args;
    if (flags.front() != "--node-id=a") args.push_back("--standalone");
    args.insert(args.end(), flags.begin(), flags.end());
    r = Run(args);
    EXPECT_EQ(r.exit_code, 2) << flags.back();
    EXPECT_NE(r.err.find(message), std::string::npos) << flags.back() << ": " << r.err;
  }
  r = Run({"--no_such_flag"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no_such_flag"), std::string::npos) << r.err;
  r = Run({"--layers=784,10"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--standalone"), std::string::npos) << r.err;
  // A file a flag names that is missing or unusable (the data, the
  // checkpoint to resume, a TLS file): it cannot start, and a restart would
  // fail the same way: exit 4 naming it, which systemd's unit names in
  // RestartPreventExitStatus (it exited 1 and was restarted every 5 s for
  // ever; a TLS file was 2, a bad flag, before that). Alone or as a member.
  r = Run({"--standalone", "--data_dir=" + (dir_ / "none").string()});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  r = Run({"--node-id=a", "--listen=127.0.0.1:0", "--peers=127.0.0.1:1", "--http-listen=",
           "--data_dir=" + (dir_ / "none").string()});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  r = Run({"--standalone", "--resume=" + (dir_ / "missing.ck").string(), "--layers=784,10"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.err.find("missing.ck"), std::string::npos) << r.err;
  r = Run({"--node-id=a", "--listen=127.0.0.1:0", "--peers=127.0.0.1:1", "--http-listen=",
           "--tls-ca=" + (dir_ / "none-ca.pem").string(), "--tls-cert=" + (dir_ / "a.pem").string(),
           "--tls-key=" + (dir_ / "a.key").string()});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_NE(r.err.find("none-ca.pem"), std::string::npos) << r.err;
}

// The user's case: a standalone run with --checkpoint stopped by SIGTERM in
// the middle of epoch 2, then --resume: it ends where the run never stopped
// ends, bit for bit (the stopped epoch used to be recorded as done: the
// resumed run ended after 1,480 steps instead of 1,800). The stopped process exits 3 and says where
// its checkpoint is; the summary says its replica is not final.
TEST_F(ReckonWorker, SigtermMidEpochThenResumeEndsAsTheUninterruptedRun) {
  const std::vector<std::string> flags = {"--standalone",
                                          "--layers=784,256,256,10",
                                          "--epochs=2",
                                          "--batch=50",
                                          "--eval-samples=500",
                                          "--backend=cpu",
                                          "--threshold=0.003",
                                          "--progress=off",
                                          "--data-dir=/usr/share/datasets/fashion-mnist"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), flags.begin(), flags.end());
    return more;
  };
  const std::string full_json = (dir_ / "full.json").string();
  Result full = Run(with({"--summary-json=" + full_json}));
  ASSERT_EQ(full.exit_code, 0) << full.err;

  const std::string checkpoint = (dir_ / "ck").string();
  const std::string stopped_json = (dir_ / "stopped.json").string();
  absl::StatusOr<::reckon::base::ChildProcess> worker = ::reckon::base::ChildProcess::Spawn(
      RECKON_WORKER_PATH,
      with({"--checkpoint=" + checkpoint, "--summary-json=" + stopped_json,
            "--http-listen=127.0.0.1:0"}),
      (dir_ / "out").string(), (dir_ / "err").string());
  ASSERT_TRUE(worker.ok()) << worker.status();
  // SIGTERM once /metrics counts 1,250 steps: 50 into epoch 2 (1,200 a
  // epoch), far from its end whatever the machine's load.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const std::string marker = "HTTP on 127.0.0.1:";
  int port = 0;
  double steps = 0;
  while (steps < 1250 && std::chrono::steady_clock::now() < deadline) {
    ASSERT_FALSE(worker->Poll().has_value()) << ReadWholeFile(dir_ / "err");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::string log = ReadWholeFile(dir_ / "out");
    if (const size_t at = log.find(marker); port == 0 && at != std::string::npos) {
      port = std::atoi(log.c_str() + at + marker.size());
    }
    if (port == 0) continue;
    const std::string body = ::reckon::testing::HttpGet(port, "/metrics").body;
    const std::string metric = "reckon_steps_total{node=\"standalone\"} ";
    if (const size_t at = body.find(metric); at != std::string::npos) {
      steps = std::atof(body.c_str() + at + metric.size());
    }
  }
  ASSERT_GE(steps, 1250);
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(std::chrono::seconds(30)), std::optional<int>(3))
      << ReadWholeFile(dir_ / "err");
  const std::string out = ReadWholeFile(dir_ / "out");
  EXPECT_NE(out.find("epoch 2/2 stopped at sample"), std::string::npos) << out;
  EXPECT_NE(out.find("--resume continues there"), std::string::npos) << out;
  absl::StatusOr<::reckon::base::Json> stopped = ::reckon::base::ReadJsonFile(stopped_json);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->at("final"), false);
  EXPECT_EQ(stopped->at("stopped_early"), true);
  EXPECT_GT(stopped->at("steps").get<int>(), 1200) << out;
  EXPECT_LT(stopped->at("steps").get<int>(), 2400) << out;

  const std::string resumed_json = (dir_ / "resumed.json").string();
  Result resumed = Run(with({"--resume=" + checkpoint, "--summary-json=" + resumed_json}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  absl::StatusOr<::reckon::base::Json> a = ::reckon::base::ReadJsonFile(full_json);
  absl::StatusOr<::reckon::base::Json> b = ::reckon::base::ReadJsonFile(resumed_json);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->at("steps"), a->at("steps"));  // 2,400
  EXPECT_EQ(b->at("weight_hash"), a->at("weight_hash"));
  EXPECT_EQ(b->at("final"), true);
}

// A checkpoint survives a power loss: on the real system calls (strace),
// the temporary file is synced before it is renamed over the checkpoint, and
// the folder (which holds the rename) is synced after. Without both, a
// power loss can leave a truncated file where the good one was.
TEST_F(ReckonWorker, CheckpointIsSyncedThenRenamedThenItsFolderSynced) {
  const std::string trace = (dir_ / "trace").string();
  const std::string checkpoint = (dir_ / "ck").string();
  Result r = ::reckon::testing::RunProcess(
      "/usr/bin/strace",
      // LeakSanitizer cannot run under ptrace: the sanitizer build's worker
      // would fail at exit for that alone.
      {"-f", "-E", "ASAN_OPTIONS=detect_leaks=0", "-e",
       "trace=openat,fsync,fdatasync,rename,renameat,renameat2", "-o", trace, RECKON_WORKER_PATH,
       "--standalone", "--layers=784,16,10", "--max-steps=3", "--eval-samples=100",
       "--progress=off", "--http-listen=", "--checkpoint=" + checkpoint},
      dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << "(strace is installed by deploy/install-deps.sh)";
  // "PID call(args) = result", one per line; the file descriptors each
  // open returned, followed to their fsync.
  std::vector<std::string> calls;
  {
    std::istringstream in(ReadWholeFile(dir_ / "trace"));
    for (std::string line; std::getline(in, line);) {
      // The pid is padded ("4501  openat(...)" beside "27228 openat(...)").
      const size_t call = line.find_first_not_of(' ', line.find(' '));
      if (call != std::string::npos) calls.push_back(line.substr(call));
    }
  }
  auto fd_of = [](const std::string& call) {
    const size_t eq = call.rfind("= ");
    return eq == std::string::npos ? std::string() : call.substr(eq + 2);
  };
  auto find = [&](size_t from, auto pred) {
    for (size_t i = from; i < calls.size(); ++i) {
      if (pred(calls[i])) return i;
    }
    return calls.size();
  };
  const std::string tmp = "\"" + checkpoint + ".tmp.";
  const size_t open_tmp = find(0, [&](const std::string& c) {
    return c.rfind("openat(", 0) == 0 && c.find(tmp) != std::string::npos;
  });
  ASSERT_LT(open_tmp, calls.size()) << ReadWholeFile(dir_ / "trace");
  const std::string tmp_fd = fd_of(calls[open_tmp]);
  const size_t rename = find(open_tmp, [&](const std::string& c) {
    return c.rfind("rename", 0) == 0 && c.find(tmp) != std::string::npos &&
           c.find(", \"" + checkpoint + "\")") != std::string::npos;
  });
  ASSERT_LT(rename, calls.size()) << ReadWholeFile(dir_ / "trace");
  const size_t sync_tmp = find(open_tmp, [&](const std::string& c) {
    return c.rfind("fsync(" + tmp_fd + ")", 0) == 0 || c.rfind("fdatasync(" + tmp_fd + ")", 0) == 0;
  });
  EXPECT_LT(sync_tmp, rename) << "the data is not synced before the rename\n"
                              << ReadWholeFile(dir_ / "trace");
  const size_t open_dir = find(rename, [&](const std::string& c) {
    return c.rfind("openat(", 0) == 0 &&
           c.find("\"" + dir_.path().string() + "\"") != std::string::npos &&
           c.find("O_DIRECTORY") != std::string::npos;
  });
  ASSERT_LT(open_dir, calls.size()) << "the folder is never opened after the rename\n"
                                    << ReadWholeFile(dir_ / "trace");
  const std::string dir_fd = fd_of(calls[open_dir]);
  EXPECT_LT(find(open_dir,
                 [&](const std::string& c) { return c.rfind("fsync(" + dir_fd + ")", 0) == 0; }),
            calls.size())
      << "the folder is not synced after the rename\n"
      << ReadWholeFile(dir_ / "trace");
}

// --after-training serve (Kubernetes, Compose): the run is reported, then the
// worker stays up, saying so on /metrics, until SIGTERM ends it with 0.
TEST_F(ReckonWorker, AfterTrainingServeStaysUpUntilSigterm) {
  absl::StatusOr<std::vector<int>> port = ::reckon::base::FreeLoopbackPorts(1);
  ASSERT_TRUE(port.ok()) << port.status();
  const fs::path summary = dir_ / "summary.json";
  absl::StatusOr<::reckon::base::ChildProcess> worker = ::reckon::base::ChildProcess::Spawn(
      RECKON_WORKER_PATH,
      {"--standalone", "--layers=784,16,10", "--max-steps=3", "--eval-samples=100",
       "--after-training=serve", "--progress=off", "--summary-json=" + summary.string(),
       "--http-listen=127.0.0.1:" + std::to_string((*port)[0])},
      (dir_ / "out").string(), (dir_ / "err").string());
  ASSERT_TRUE(worker.ok()) << worker.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(summary) && std::chrono::steady_clock::now() < deadline) {
    ASSERT_FALSE(worker->Poll().has_value()) << ReadWholeFile(dir_ / "err");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(fs::exists(summary)) << ReadWholeFile(dir_ / "out");
  // Training is over and reported; the worker serves on.
  ::reckon::testing::HttpResult metrics;
  for (int i = 0; i < 100 && metrics.body.find("reckon_training_finished{node=\"standalone\"} 1") ==
                                 std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    metrics = ::reckon::testing::HttpGet((*port)[0], "/metrics");
  }
  EXPECT_NE(metrics.body.find("reckon_training_finished{node=\"standalone\"} 1"), std::string::npos)
      << metrics.body;
  EXPECT_EQ(::reckon::testing::HttpGet((*port)[0], "/readyz").status, 200);
  EXPECT_FALSE(worker->Wait(std::chrono::milliseconds(500)).has_value())
      << "the worker exited after training with --after-training serve";
  worker->Signal(SIGTERM);
  EXPECT_EQ(worker->Wait(std::chrono::seconds(10)), std::optional<int>(0))
      << ReadWholeFile(dir_ / "err");
  const std::string out = ReadWholeFile(dir_ / "out");
  EXPECT_NE(out.find("serving until SIGTERM"), std::string::npos) << out;
  // The line names the signal and who sent it: this test.
  EXPECT_NE(out.find("stopped by a signal (SIGTERM from pid " + std::to_string(getpid()) + " ("),
            std::string::npos)
      << out;

  Result r = Run({"--standalone", "--after-training=linger"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--after-training 'linger' is not exit or serve"), std::string::npos)
      << r.err;
}

TEST_F(ReckonWorker, CudaBackendRunsOrSaysWhyItIsUnavailable) {
  Result r =
      Run({"--standalone", "--backend=cuda", "--layers=784,10", "--epochs=1", "--max-steps=20",
           "--eval-samples=500", "--data_dir", "/usr/share/datasets/fashion-mnist"});
  if (r.exit_code == 0) {  // a machine with a GPU
    EXPECT_NE(r.out.find("backend cuda ("), std::string::npos) << r.out;
    return;
  }
  EXPECT_EQ(r.exit_code, 4) << "cannot start: a restart would not help";
  EXPECT_NE(r.err.find("--backend cuda:"), std::string::npos) << r.err;
  std::printf("no GPU here, so the refusal was checked: %s", r.err.c_str());
}

}  // namespace
