// reckonctl evaluate --model model.onnx --data DIR [--split test] [--confusion]
// reckonctl predict --model model.onnx --input X.npy --out P.npy
// Both run the exported file (ctl/onnx_runner.h), not the checkpoint it
// came from, on raw features: what a user of the model has.
#include <cmath>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/files.h"
#include "base/flags.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"
#include "ctl/onnx_runner.h"
#include "worker/dataset.h"
#include "worker/npy.h"
#include "worker/npy_dataset.h"

ABSL_FLAG(std::string, model, "", "an exported model (reckonctl export --format onnx)");
ABSL_FLAG(std::string, data, "",
          "a data folder as --data-dir takes it (IDX files or a NumPy folder)");
ABSL_FLAG(std::string, split, "test", "evaluate: which split of --data (test or train)");
ABSL_FLAG(bool, confusion, false, "evaluate: print the confusion matrix too");

namespace reckon::ctl {

namespace {

// Rows a Run takes at a time (fewer for a very wide graph: RowsAtOnce).
constexpr size_t kRowsAtOnce = 1000;

// The split of `dir` as raw features (what an exported model takes): IDX
// pixels 0..255, NumPy features as stored.
absl::StatusOr<worker::Dataset> RawSplit(const std::string& dir, const std::string& split,
                                         int classes) {
  if (worker::IsNpyDataset(dir)) return worker::LoadNpyDataset(dir, split, classes);
  return worker::LoadIdxDataset(dir, split == "test" ? "t10k" : "train", /*divisor=*/1.0f);
}

}  // namespace

int RunEvaluateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl evaluate",
                              {{"model", "", true}, {"data", "", true}, {"split"}, {"confusion"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  const std::string split = absl::GetFlag(FLAGS_split);
  if (split != "test" && split != "train") {
    err << "reckonctl evaluate: --split " << split << ": give test or train\n";
    return kExitUsage;
  }
  absl::StatusOr<OnnxRunner> model = OnnxRunner::Load(absl::GetFlag(FLAGS_model));
  if (!model.ok()) {
    err << "reckonctl evaluate: " << model.status().message() << "\n";
    return kExitFailed;
  }
  const std::string dir = absl::GetFlag(FLAGS_data);
  absl::StatusOr<worker::Dataset> data = RawSplit(dir, split, int(model->outputs()));
  if (!data.ok()) {
    err << "reckonctl evaluate: " << data.status().message() << "\n";
    return kExitFailed;
  }
  if (data->features() != model->inputs()) {
    err << "reckonctl evaluate: the model takes " << model->inputs() << " features but " << dir
        << " has " << data->features() << "\n";
    return kExitFailed;
  }
  const size_t classes = size_t(model->outputs()), width = size_t(model->inputs());
  std::vector<std::vector<uint64_t>> confusion(classes, std::vector<uint64_t>(classes, 0));
  uint64_t correct = 0;
  const size_t at_once = model->RowsAtOnce(kRowsAtOnce);
  for (size_t begin = 0; begin < data->size(); begin += at_once) {
    const size_t rows = std::min(at_once, data->size() - begin);
    const std::vector<float> p = model->Run(&data->images[begin * width], rows);
    for (size_t i = 0; i < rows; ++i) {
      const float* row = &p[i * classes];
      const size_t predicted = size_t(std::max_element(row, row + classes) - row);
      const size_t label = size_t(data->labels[begin + i]);
      correct += predicted == label;
      ++confusion[label][predicted];
    }
  }
  out << absl::StrFormat("accuracy %.4f (%d of %d) of %s on the %s split of %s\n",
                         data->size() ? double(correct) / double(data->size()) : 0.0, correct,
                         data->size(), absl::GetFlag(FLAGS_model), split, dir);
  if (absl::GetFlag(FLAGS_confusion)) {
    out << "confusion (rows: the label, columns: the prediction)\n";
    for (size_t a = 0; a < classes; ++a) {
      out << absl::StrFormat("%5d |", a);
      for (size_t b = 0; b < classes; ++b) out << absl::StrFormat(" %6d", confusion[a][b]);
      out << "\n";
    }
  }
  return kExitOk;
}

int RunPredictCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl predict",
                              {{"model", "", true}, {"input", "", true}, {"out", "", true}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  absl::StatusOr<OnnxRunner> model = OnnxRunner::Load(absl::GetFlag(FLAGS_model));
  if (!model.ok()) {
    err << "reckonctl predict: " << model.status().message() << "\n";
    return kExitFailed;
  }
  const std::string input = absl::GetFlag(FLAGS_input);
  absl::StatusOr<worker::NpyFile> x = worker::NpyFile::Open(input);
  if (!x.ok()) {
    err << "reckonctl predict: " << x.status().message() << "\n";
    return kExitFailed;
  }
  if (x->header().shape.size() != 2 || int64_t(x->row_elements()) != model->inputs()) {
    err << "reckonctl predict: " << input << " is not [N, " << model->inputs()
        << "] (the model's features)\n";
    return kExitFailed;
  }
  const size_t width = size_t(model->inputs()), classes = size_t(model->outputs());
  std::string probabilities;
  probabilities.reserve(x->rows() * classes * sizeof(float));
  const size_t at_once = model->RowsAtOnce(kRowsAtOnce);
  std::vector<float> rows_in(at_once * width);
  for (uint64_t begin = 0; begin < x->rows(); begin += at_once) {
    const size_t rows = size_t(std::min<uint64_t>(at_once, x->rows() - begin));
    for (size_t i = 0; i < rows; ++i) {
      float* row = &rows_in[i * width];
      x->RowAsFloats(begin + i, row);
      for (size_t j = 0; j < width; ++j) {
        if (!std::isfinite(row[j])) {
          err << "reckonctl predict: " << input << ": feature " << j << " of row " << begin + i
              << " is " << row[j] << "\n";
          return kExitFailed;
        }
      }
    }
    const std::vector<float> p = model->Run(rows_in.data(), rows);
    probabilities.append(reinterpret_cast<const char*>(p.data()), p.size() * sizeof(float));
  }
  const std::string path = absl::GetFlag(FLAGS_out);
  const std::string bytes =
      worker::NpyBytes(worker::NpyType::kFloat32, {x->rows(), classes}, probabilities);
  if (absl::Status s = base::WriteFileAtomically(path, bytes); !s.ok()) {
    err << "reckonctl predict: " << s.message() << "\n";
    return kExitFailed;
  }
  out << "predicted " << x->rows() << " rows of " << input << ": class probabilities [" << x->rows()
      << ", " << classes << "] float32 in " << path << "\n";
  return kExitOk;
}

}  // namespace reckon::ctl
