// reckonctl export as a user runs it: a worker trains and checkpoints, the
// network is exported as ONNX and .npz, and runtimes that are not reckon's
// run it on raw features (tests/export/check_export.py: OpenCV's dnn module
// on the ONNX file, numpy on the .npz, the onnx package's checker): the
// same predictions, and the accuracy the worker's summary printed, to the
// sample. What cannot be exported is refused, naming why.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "base/process.h"
#include "codec/fixed_point.h"
#include "tests/test_process.h"
#include "worker/checkpoint.h"
#include "worker/npy.h"

namespace {

namespace fs = std::filesystem;
using ::reckon::testing::ProcessResult;
using ::reckon::testing::RunProcess;

// Debian's interpreter: its python3-numpy, python3-onnx and python3-opencv
// (deploy/install-deps.sh), whatever python3 comes first on PATH.
constexpr char kPython[] = "/usr/bin/python3";

class ReckonctlExport : public ::testing::Test {
 protected:
  ProcessResult Worker(std::vector<std::string> args) {
    args.push_back("--http-listen=127.0.0.1:0");
    return RunProcess(RECKON_WORKER_PATH, std::move(args), dir_.path());
  }
  ProcessResult Export(const std::string& checkpoint, const std::string& format,
                       const std::string& out) {
    return RunProcess(RECKONCTL_PATH,
                      {"export", "--checkpoint", checkpoint, "--format", format, "--out", out},
                      dir_.path());
  }
  ProcessResult Ctl(std::vector<std::string> args) {
    return RunProcess(RECKONCTL_PATH, std::move(args), dir_.path());
  }
  // Trains on `data`, exports both formats, and runs the independent check
  // expecting the worker's own count of correct test samples; then
  // reckonctl evaluate runs the ONNX file and counts the same, and with
  // `features` (a .npy of the test split's raw features) reckonctl predict
  // gives OpenCV's probabilities.
  void TrainExportAndCheck(const std::string& data, std::vector<std::string> flags,
                           size_t test_samples, const std::string& features = "") {
    const std::string ck = (dir_ / "ck").string(), summary = (dir_ / "s.json").string();
    flags.insert(flags.end(), {"--standalone", "--data-dir", data, "--checkpoint", ck,
                               "--summary-json", summary});
    const ProcessResult trained = Worker(flags);
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    EXPECT_NE(trained.out.find("reckonctl export --checkpoint " + ck + " --format onnx"),
              std::string::npos)
        << trained.out;
    absl::StatusOr<reckon::base::Json> s = reckon::base::ReadJsonFile(summary);
    ASSERT_TRUE(s.ok()) << s.status();
    const long correct = std::lround(double(s->at("test_accuracy")) * double(test_samples));
    for (const char* format : {"onnx", "npz"}) {
      const ProcessResult e = Export(ck, format, (dir_ / "model.").string() + format);
      ASSERT_EQ(e.exit_code, 0) << e.err;
      EXPECT_NE(e.out.find("raw features in, class probabilities out"), std::string::npos) << e.out;
    }
    std::vector<std::string> check_args = {
        CHECK_EXPORT_PY,    (dir_ / "model.onnx").string(), (dir_ / "model.npz").string(), data,
        "--expect-correct", std::to_string(correct)};
    if (!features.empty()) {
      const std::string predicted = (dir_ / "p.npy").string();
      const ProcessResult p = Ctl({"predict", "--model", (dir_ / "model.onnx").string(), "--input",
                                   features, "--out", predicted});
      ASSERT_EQ(p.exit_code, 0) << p.err;
      check_args.insert(check_args.end(), {"--predictions", predicted});
    }
    const ProcessResult evaluated =
        Ctl({"evaluate", "--model", (dir_ / "model.onnx").string(), "--data", data, "--confusion"});
    ASSERT_EQ(evaluated.exit_code, 0) << evaluated.err;
    EXPECT_NE(evaluated.out.find(absl::StrCat("(", correct, " of ", test_samples, ")")),
              std::string::npos)
        << "the summary said " << correct << ": " << evaluated.out;
    EXPECT_NE(evaluated.out.find("confusion (rows: the label"), std::string::npos);
    const ProcessResult check = RunProcess(kPython, check_args, dir_.path());
    ASSERT_FALSE(check.out.empty()) << check.err;
    const reckon::base::Json got = reckon::base::Json::parse(check.out);
    std::printf("FIGURES %s\n", check.out.c_str());
    EXPECT_EQ(got.at("samples"), test_samples);
    EXPECT_EQ(got.at("predictions_shared"), test_samples) << check.out;
    EXPECT_EQ(got.at("onnx_correct"), correct)
        << "the summary said " << correct << ": " << check.out;
    EXPECT_EQ(got.at("npz_correct"), correct) << check.out;
    EXPECT_EQ(got.at("opset"), 17);
    EXPECT_EQ(std::string(got.at("weight_hash")), std::string(s->at("weight_hash")));
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  }
  // Starts w0 alone in its cluster (--bootstrap), serving once it has
  // trained one epoch with `flags` (--after-training serve), and waits for
  // its summary: then `serving_` is the process, `serving_address_` its
  // gossip address, `serving_summary_` what it reported.
  void StartServingWorker(const std::vector<std::string>& flags) {
    serving_address_ = absl::StrCat("127.0.0.1:", reckon::base::FreeLoopbackPorts(1).value()[0]);
    const std::string summary = (dir_ / "s.json").string();
    std::vector<std::string> args = {"--node-id",   "w0",
                                     "--listen",    serving_address_,
                                     "--peers",     serving_address_,
                                     "--bootstrap", "--after-training",
                                     "serve",       "--epochs",
                                     "1",           "--summary-json",
                                     summary,       "--http-listen=127.0.0.1:0"};
    args.insert(args.end(), flags.begin(), flags.end());
    absl::StatusOr<reckon::base::ChildProcess> worker = reckon::base::ChildProcess::Spawn(
        RECKON_WORKER_PATH, args, (dir_ / "w0.out").string(), (dir_ / "w0.err").string());
    ASSERT_TRUE(worker.ok()) << worker.status();
    serving_.emplace(*std::move(worker));
    for (int i = 0; i < 600 && !fs::exists(summary); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(fs::exists(summary)) << reckon::testing::ReadWholeFile(dir_ / "w0.err");
    absl::StatusOr<reckon::base::Json> s = reckon::base::ReadJsonFile(summary);
    ASSERT_TRUE(s.ok()) << s.status();
    serving_summary_ = *std::move(s);
  }
  // SIGTERM to the serving worker: it leaves and exits 0.
  void StopServingWorker() {
    serving_->Signal(SIGTERM);
    EXPECT_EQ(serving_->Wait(std::chrono::seconds(30)), 0);
  }

  reckon::testing::ScratchDir dir_;
  std::optional<reckon::base::ChildProcess> serving_;
  std::string serving_address_;
  reckon::base::Json serving_summary_;
};

// Fashion-MNIST's IDX files: raw pixels 0..255 go in (the export divides by
// 255 and standardizes as the worker did). Both activations.
TEST_F(ReckonctlExport, OpenCvAndNumpyPredictWhatTheWorkerMeasured) {
  TrainExportAndCheck("/usr/share/datasets/fashion-mnist",
                      {"--layers", "784,64,10", "--max-steps", "150"}, 10000);
  TrainExportAndCheck(
      "/usr/share/datasets/fashion-mnist",
      {"--layers", "784,32,32,10", "--activation", "sigmoid", "--lr", "0.1", "--max-steps", "150"},
      10000);
}

// A NumPy folder whose features have any scales: each is standardized by its
// own statistics, which the export carries, so raw features go in.
TEST_F(ReckonctlExport, ANumpyTrainedModelTakesRawFeatures) {
  using ::reckon::worker::NpyBytes;
  using ::reckon::worker::NpyType;
  const fs::path data = dir_ / "data";
  fs::create_directories(data);
  std::mt19937 rng(9);
  std::normal_distribution<float> noise;
  auto write_split = [&](const std::string& split, int n) {
    std::vector<float> x(size_t(n) * 6);
    std::vector<int64_t> y(n);
    for (int i = 0; i < n; ++i) {
      y[i] = i % 4;
      for (int j = 0; j < 6; ++j) x[i * 6 + j] = noise(rng) + (j == y[i] ? 2.0f : 0.0f);
      x[i * 6 + 1] = 500.0f + 300.0f * x[i * 6 + 1];  // another scale and offset
      x[i * 6 + 5] = 1000.0f * noise(rng);
    }
    std::ofstream((data / (split + "_x.npy")).string(), std::ios::binary)
        << NpyBytes(NpyType::kFloat32, {uint64_t(n), 6},
                    std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
    std::ofstream((data / (split + "_y.npy")).string(), std::ios::binary)
        << NpyBytes(NpyType::kInt64, {uint64_t(n)},
                    std::string(reinterpret_cast<const char*>(y.data()), y.size() * 8));
  };
  write_split("train", 2000);
  write_split("test", 800);
  TrainExportAndCheck(data.string(), {"--layers", "6,16,4", "--epochs", "3"}, 800,
                      (data / "test_x.npy").string());
  // Evaluate refuses data the model cannot take, and a file that is not a
  // model it runs, naming the node.
  ProcessResult r = Ctl({"evaluate", "--model", (dir_ / "model.onnx").string(), "--data",
                         "/usr/share/datasets/fashion-mnist"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the model takes 6 features but /usr/share/datasets/fashion-mnist has 784"),
            std::string::npos)
      << r.err;
  std::string bytes = reckon::testing::ReadWholeFile(dir_ / "model.onnx");
  const size_t relu = bytes.find("Relu");
  ASSERT_NE(relu, std::string::npos);
  bytes.replace(relu, 4, "Conv");
  std::ofstream((dir_ / "conv.onnx").string(), std::ios::binary) << bytes;
  r = Ctl({"evaluate", "--model", (dir_ / "conv.onnx").string(), "--data", data.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("node 'h1' (Conv): not run here"), std::string::npos) << r.err;
  std::ofstream((dir_ / "junk.onnx").string(), std::ios::binary) << "\x08\x96not a model";
  r = Ctl({"predict", "--model", (dir_ / "junk.onnx").string(), "--input",
           (data / "test_x.npy").string(), "--out", (dir_ / "q.npy").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not an ONNX model"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "q.npy"));
  r = Ctl({"predict", "--model", (dir_ / "model.onnx").string(), "--input",
           (data / "test_y.npy").string(), "--out", (dir_ / "q.npy").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not [N, 6]"), std::string::npos) << r.err;
}

// docs/guide-worker.md "Using the trained model", its commands as written: Fashion-MNIST
// converted to NumPy files, four workers, export, evaluate.
TEST_F(ReckonctlExport, TheReadmeExampleRuns) {
  const std::string npy = (dir_ / "fashion-npy").string(), run = (dir_ / "run").string();
  const ProcessResult converted = RunProcess(kPython, {FASHION_TO_NPY_PY, npy}, dir_.path());
  ASSERT_EQ(converted.exit_code, 0) << converted.err;
  const ProcessResult cluster = Ctl({"local", "--workers", "4", "--work-dir", run, "--checkpoints",
                                     "--data-dir", npy, "--layers", "784,256,10", "--epochs", "2"});
  ASSERT_EQ(cluster.exit_code, 0) << cluster.out << cluster.err;
  const std::string model = (dir_ / "model.onnx").string();
  const ProcessResult exported = Export(run + "/w0.ck", "onnx", model);
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  // The checkpoint holds the cluster's final replica, not w0's at its last
  // step (it did: the peers' last messages came after it was written).
  const size_t identical = cluster.out.find("replicas: identical (");
  ASSERT_NE(identical, std::string::npos) << cluster.out;
  const std::string final_hash = cluster.out.substr(identical + 21, 16);
  EXPECT_NE(exported.out.find("(weights " + final_hash + ","), std::string::npos)
      << "the cluster ended at " << final_hash << ": " << exported.out;
  const ProcessResult evaluated = Ctl({"evaluate", "--model", model, "--data", npy});
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.err;
  absl::StatusOr<reckon::base::Json> s = reckon::base::ReadJsonFile(run + "/w0.json");
  ASSERT_TRUE(s.ok()) << s.status();
  const long correct = std::lround(double(s->at("test_accuracy")) * 10000);
  EXPECT_NE(evaluated.out.find(absl::StrCat("(", correct, " of 10000)")), std::string::npos)
      << "w0's summary said " << correct << ": " << evaluated.out;
  std::printf("FIGURES the README example: %s", evaluated.out.c_str());
}

// A running worker's model (--peer): its replica at the version vector it
// names, with its standardization, asked for with the cluster token, and
// not taken for a worker joining. Checked as a checkpoint's export is.
TEST_F(ReckonctlExport, FromARunningPeerItsReplicaAtTheVectorItNames) {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  ASSERT_NO_FATAL_FAILURE(StartServingWorker({"--cluster-token", "the token", "--data-dir", data,
                                              "--layers", "784,32,10", "--max-steps", "120"}));
  const std::string& address = serving_address_;
  const reckon::base::Json* s = &serving_summary_;
  EXPECT_NE(reckon::testing::ReadWholeFile(dir_ / "w0.out").find("reckonctl export --peer"),
            std::string::npos)
      << "a serving worker says how to export it";

  const std::string onnx = (dir_ / "model.onnx").string(), npz = (dir_ / "model.npz").string();
  ProcessResult r = Ctl({"export", "--peer", address, "--format", "onnx", "--out", onnx});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cluster token does not match"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(onnx));
  r = Ctl({"export", "--peer", address, "--checkpoint", "ck", "--out", onnx});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("give --checkpoint FILE or --peer HOST:PORT (one of them)"),
            std::string::npos)
      << r.err;
  for (const std::string& out : {onnx, npz}) {
    r = Ctl({"export", "--peer", address, "--cluster-token", "the token", "--format",
             out == onnx ? "onnx" : "npz", "--out", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string vector = s->at("version_vector").dump();
    EXPECT_NE(r.out.find(absl::StrCat("peer ", address, " (w0) at version vector ", vector)),
              std::string::npos)
        << r.out << " (the summary's vector " << vector << ")";
  }
  const long correct = std::lround(double(s->at("test_accuracy")) * 10000.0);
  const ProcessResult check = RunProcess(
      kPython, {CHECK_EXPORT_PY, onnx, npz, data, "--expect-correct", std::to_string(correct)},
      dir_.path());
  ASSERT_FALSE(check.out.empty()) << check.err;
  const reckon::base::Json got = reckon::base::Json::parse(check.out);
  EXPECT_EQ(got.at("onnx_correct"), correct) << check.out;
  EXPECT_EQ(got.at("npz_correct"), correct) << check.out;
  EXPECT_EQ(std::string(got.at("weight_hash")), std::string(s->at("weight_hash")));
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  StopServingWorker();
  EXPECT_EQ(reckon::testing::ReadWholeFile(dir_ / "w0.err").find("is joining"), std::string::npos)
      << "an export was taken for a worker joining";
}

// With TLS, reckonctl's certificate of the cluster's CA (reckonctl certs)
// is what an export asks for; without one the TLS handshake refuses it.
TEST_F(ReckonctlExport, FromARunningTlsPeerWithReckonctlsCertificate) {
  const std::string certs = (dir_ / "certs").string();
  ASSERT_EQ(Ctl({"certs", "--out", certs, "--nodes", "w0"}).exit_code, 0);
  ASSERT_NO_FATAL_FAILURE(StartServingWorker({"--tls-cert", certs + "/w0.pem", "--tls-key",
                                              certs + "/w0.key", "--tls-ca", certs + "/ca.pem",
                                              "--layers", "784,16,10", "--max-steps", "50"}));
  const std::string& address = serving_address_;
  const reckon::base::Json* s = &serving_summary_;
  const std::string npz = (dir_ / "model.npz").string();
  ProcessResult r =
      Ctl({"export", "--peer", address, "--timeout-ms", "3000", "--format", "npz", "--out", npz});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_FALSE(fs::exists(npz));
  r = Ctl({"export", "--peer", address, "--tls-cert", certs + "/reckonctl.pem", "--tls-key",
           certs + "/reckonctl.key", "--tls-ca", certs + "/ca.pem", "--format", "npz", "--out",
           npz});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(std::string(s->at("weight_hash")).substr(0, 16)), std::string::npos)
      << r.out;
  StopServingWorker();
}

TEST_F(ReckonctlExport, RefusesWhatItCannotExportNamingIt) {
  const std::string ck = (dir_ / "ck").string(), out = (dir_ / "m.onnx").string();
  ProcessResult r = Export(ck, "onnx", out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(ck), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));

  r = Export(ck, "tflite", out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--format tflite: give onnx or npz"), std::string::npos) << r.err;

  // A checkpoint from before the standardization was kept.
  reckon::v1::Checkpoint header;
  header.set_model("4,3/relu");
  header.set_fraction_bits(32);
  std::vector<int64_t> weights(4 * 3 + 3, 1 << 20);
  header.set_weight_hash(reckon::codec::WeightHashOf(weights));
  ASSERT_TRUE(reckon::worker::SaveCheckpoint(ck, header, weights, {}, {}).ok());
  r = Export(ck, "npz", out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("holds no input standardization"), std::string::npos) << r.err;

  // Weights that are not the ones their hash names; a model of another size.
  header.add_input_mean(0);
  header.add_input_inv_stddev(1);
  header.set_input_divisor(1);
  weights[3] += 1;
  ASSERT_TRUE(reckon::worker::SaveCheckpoint(ck, header, weights, {}, {}).ok());
  r = Export(ck, "onnx", out);
  EXPECT_NE(r.err.find("do not match their recorded hash"), std::string::npos) << r.err;
  header.set_weight_hash(reckon::codec::WeightHashOf(weights));
  ASSERT_TRUE(reckon::worker::SaveCheckpoint(ck, header, weights, {}, {}).ok());
  r = Export(ck, "onnx", out);
  EXPECT_NE(r.err.find("standardization of 1 features for a model of 4 inputs"), std::string::npos)
      << r.err;
  header.set_model("4,5/relu");
  ASSERT_TRUE(reckon::worker::SaveCheckpoint(ck, header, weights, {}, {}).ok());
  r = Export(ck, "onnx", out);
  EXPECT_NE(r.err.find("15 weights for a model of 25"), std::string::npos) << r.err;
  // A corrupt file.
  std::string bytes = reckon::testing::ReadWholeFile(ck);
  bytes[bytes.size() / 2] ^= 0x40;
  std::ofstream(ck, std::ios::binary | std::ios::trunc) << bytes;
  r = Export(ck, "onnx", out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(ck), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
