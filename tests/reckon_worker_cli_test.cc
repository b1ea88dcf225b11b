// The reckon-worker binary as a user runs it: flags, errors, summary JSON.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code;
  std::string out, err;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ReckonWorker : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("worker_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  Result Run(std::vector<std::string> args) {
    const fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr)) {
        ::_exit(127);
      }
      std::string bin = RECKON_WORKER_PATH;
      std::vector<char*> argv = {bin.data()};
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin.c_str(), argv.data());
      ::_exit(127);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), Slurp(out),
            Slurp(err)};
  }
  fs::path dir_;
};

TEST_F(ReckonWorker, ShortRunWritesAFullSummary) {
  const std::string summary = (dir_ / "summary.json").string();
  Result r = Run({"--standalone", "--layers=784,32,10", "--shard=0/20", "--epochs=1",
                  "--eval_samples=1000", "--backend=cpu", "--threshold=0.003",
                  "--summary_json=" + summary});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("backend cpu (OpenBLAS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 1/1"), std::string::npos) << r.out;
  const std::string json = Slurp(summary);
  for (const char* key : {"test_accuracy", "epochs", "steps", "samples_per_s", "params", "codec",
                          "threshold", "updates_sent", "wire_bytes", "dense_bytes",
                          "compression_ratio", "weight_hash"}) {
    EXPECT_NE(json.find(std::string("\"") + key + "\":"), std::string::npos) << key << "\n" << json;
  }
  EXPECT_NE(json.find("\"params\": 25450"), std::string::npos) << json;  // 784*32+32+32*10+10
  EXPECT_NE(json.find("\"steps\": 30"), std::string::npos) << json;      // 3000 samples / 100
  EXPECT_NE(json.find("\"codec\": \"threshold-rice\""), std::string::npos) << json;
}

TEST_F(ReckonWorker, BadFlagsAndMissingDataFailClearly) {
  Result r = Run({"--standalone", "--layers=784,x,10"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'x' is not a layer width"), std::string::npos) << r.err;
  r = Run({"--standalone", "--codec=gzip"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--codec 'gzip'"), std::string::npos) << r.err;
  r = Run({"--standalone", "--shard=3/3"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--shard '3/3'"), std::string::npos) << r.err;
  r = Run({"--standalone", "--backend=tpu"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--backend 'tpu'"), std::string::npos) << r.err;
  r = Run({"--no_such_flag"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no_such_flag"), std::string::npos) << r.err;
  r = Run({"--layers=784,10"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--standalone"), std::string::npos) << r.err;
  r = Run({"--standalone", "--data_dir=" + (dir_ / "none").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  r = Run({"--standalone", "--resume=" + (dir_ / "missing.ck").string(), "--layers=784,10"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.ck"), std::string::npos) << r.err;
}

TEST_F(ReckonWorker, CudaBackendSaysWhyItIsUnavailable) {
  Result r = Run({"--standalone", "--backend=cuda", "--layers=784,10", "--epochs=1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--backend cuda:"), std::string::npos) << r.err;
}

}  // namespace
