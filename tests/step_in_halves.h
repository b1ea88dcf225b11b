// The step taken in halves (Backend::StageBatch, LaunchTrainStep,
// FinishTrainStep) held to TrainStep, for any backend: the CPU suite runs
// it on the CPU backend (the defaults), the GPU suite on the CUDA backend
// (two inputs taking turns, a copy stream).
#ifndef RECKON_TESTS_STEP_IN_HALVES_H_
#define RECKON_TESTS_STEP_IN_HALVES_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/backend.h"

namespace reckon::testing {

using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<model::Backend>>()>;

// Two backends from `make` (the same weights: `make` loads them): one takes
// TrainStep on `steps` batches of `batch` samples of `features` pixels; the
// other the step in halves, each next batch staged while the step before
// is launched, from a host buffer that is overwritten with other samples
// (and a label no model has) as soon as StageBatch returns. Both apply
// their emissions alike (threshold words as their own, of `step_quanta`).
// After every step: stats, emission and replica equal, bit for bit. Then
// the refusals: a launch with nothing staged, a finish with nothing
// launched, a batch of part of a sample, a label outside the classes.
inline void ExpectTheStepInHalvesIsTrainStep(const BackendFactory& make, int steps, int batch,
                                             int features, int64_t step_quanta) {
  absl::StatusOr<std::unique_ptr<model::Backend>> whole = make();
  absl::StatusOr<std::unique_ptr<model::Backend>> halves = make();
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(halves.ok()) << halves.status();
  std::vector<float> images(size_t(steps + 1) * batch * features);
  std::vector<int32_t> labels(size_t(steps + 1) * batch);
  uint32_t state = 12345;
  for (float& x : images) {
    state = state * 1664525u + 1013904223u;
    x = float(state >> 8) / float(1u << 24);
  }
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i * 7 + i / 13) % 10);
  const auto images_of = [&](int k) {
    return std::span<const float>(images).subspan(size_t(k) * batch * features,
                                                  size_t(batch) * features);
  };
  const auto labels_of = [&](int k) {
    return std::span<const int32_t>(labels).subspan(size_t(k) * batch, size_t(batch));
  };
  const auto apply = [step_quanta](model::Backend& backend, const model::Emission& e) {
    return e.words.empty() && !e.quanta().empty() ? backend.ApplyDense(e.quanta())
                                                  : backend.ApplyOwnEmission(step_quanta, e.words);
  };
  // What the caller stages from, and overwrites at once.
  std::vector<float> host_images(size_t(batch) * features);
  std::vector<int32_t> host_labels(batch);
  const auto stage = [&](int k) {
    std::copy_n(images_of(k).begin(), host_images.size(), host_images.begin());
    std::copy_n(labels_of(k).begin(), host_labels.size(), host_labels.begin());
    const absl::Status staged = (*halves)->StageBatch(host_images, host_labels);
    std::fill(host_images.begin(), host_images.end(), 0.5f);
    std::fill(host_labels.begin(), host_labels.end(), int32_t{1} << 20);
    return staged;
  };
  ASSERT_TRUE(stage(0).ok());
  for (int k = 0; k < steps; ++k) {
    const float learning_rate = 0.05f + 0.01f * float(k);
    model::Emission want, got;
    absl::StatusOr<model::BatchStats> expected =
        (*whole)->TrainStep(images_of(k).data(), labels_of(k).data(), batch, learning_rate, &want);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_TRUE((*halves)->LaunchTrainStep(learning_rate, &got).ok()) << "step " << k;
    ASSERT_TRUE(stage(k + 1).ok()) << "step " << k;
    absl::StatusOr<model::BatchStats> stats = (*halves)->FinishTrainStep();
    ASSERT_TRUE(stats.ok()) << "step " << k << ": " << stats.status();
    EXPECT_EQ(stats->loss_sum, expected->loss_sum) << "step " << k;
    EXPECT_EQ(stats->correct, expected->correct) << "step " << k;
    EXPECT_EQ(got.words, want.words) << "step " << k;
    EXPECT_EQ(got.quanta().ToVector(), want.quanta().ToVector()) << "step " << k;
    EXPECT_EQ(got.encoded.SerializeAsString(), want.encoded.SerializeAsString()) << "step " << k;
    EXPECT_FALSE(want.words.empty() && want.quanta().empty()) << "step " << k << " emitted nothing";
    ASSERT_TRUE(apply(**whole, want).ok());
    ASSERT_TRUE(apply(**halves, got).ok());
    EXPECT_EQ(*(*halves)->WeightHash(), *(*whole)->WeightHash()) << "step " << k;
  }
  // The batch staged last is still there: it trains as TrainStep does.
  model::Emission want, got;
  ASSERT_TRUE((*whole)
                  ->TrainStep(images_of(steps).data(), labels_of(steps).data(), batch, 0.05f, &want)
                  .ok());
  ASSERT_TRUE((*halves)->LaunchTrainStep(0.05f, &got).ok());
  ASSERT_TRUE((*halves)->FinishTrainStep().ok());
  EXPECT_EQ(got.words, want.words);
  EXPECT_EQ(got.quanta().ToVector(), want.quanta().ToVector());
  EXPECT_EQ(got.encoded.SerializeAsString(), want.encoded.SerializeAsString());

  // Refusals, each naming what is wrong; none leaves a step behind.
  const absl::Status unstaged = (*halves)->LaunchTrainStep(0.05f, &got);
  EXPECT_EQ(unstaged.code(), absl::StatusCode::kFailedPrecondition) << unstaged;
  EXPECT_NE(unstaged.message().find("no batch is staged"), std::string::npos) << unstaged;
  const absl::StatusOr<model::BatchStats> unlaunched = (*halves)->FinishTrainStep();
  EXPECT_EQ(unlaunched.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(unlaunched.status().message().find("no step was launched"), std::string::npos)
      << unlaunched.status();
  const absl::Status partial = (*halves)->StageBatch(
      std::span<const float>(images).first(size_t(batch) * features - 1), labels_of(0));
  EXPECT_EQ(partial.code(), absl::StatusCode::kInvalidArgument) << partial;
  EXPECT_EQ((*halves)->LaunchTrainStep(0.05f, &got).code(), absl::StatusCode::kFailedPrecondition)
      << "a refused batch left a batch staged";
  // A label outside the classes: refused by StageBatch (CUDA) or at the
  // latest by FinishTrainStep (the defaults, as TrainStep), naming the
  // sample; the replica is as it was.
  const std::string before = *(*halves)->WeightHash();
  std::vector<int32_t> bad(labels_of(0).begin(), labels_of(0).end());
  bad[3] = 10;
  absl::Status refused = (*halves)->StageBatch(images_of(0), bad);
  if (refused.ok()) {
    ASSERT_TRUE((*halves)->LaunchTrainStep(0.05f, &got).ok());
    refused = (*halves)->FinishTrainStep().status();
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("label 10 of sample 3"), std::string::npos) << refused;
  EXPECT_EQ(*(*halves)->WeightHash(), before);
}

}  // namespace reckon::testing

#endif  // RECKON_TESTS_STEP_IN_HALVES_H_
