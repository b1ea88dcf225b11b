// worker::EpochPlan: how epochs are cut into steps, and where a restarted
// member's shard goes on (worker/epoch_plan.h).
#include "worker/epoch_plan.h"

#include <gtest/gtest.h>

#include "worker/trainer.h"

namespace reckon::worker {
namespace {

TrainerOptions Ramped() {
  TrainerOptions o;
  o.warmup_batch = 25;
  o.warmup_fraction = 1.0 / 6;
  return o;
}

TEST(EpochPlan, TheFirstEpochRampsThenStepsAtTheBatchInForce) {
  const EpochPlan plan(Ramped(), 6000);
  // 1,000 samples of ramp in 40 steps of 25, then 5,000 in 50 steps of 100.
  const EpochPlan::Layout first = plan.Of(0, 100);
  EXPECT_EQ(first.ramp_steps, 40u);
  EXPECT_EQ(first.ramp_samples, 1000u);
  EXPECT_EQ(first.steps, 90u);
  const EpochPlan::Layout later = plan.Of(1, 100);
  EXPECT_EQ(later.ramp_steps, 0u);
  EXPECT_EQ(later.steps, 60u);
  EXPECT_EQ(plan.BatchAt(0, 0, 100), 25);
  EXPECT_EQ(plan.BatchAt(0, 975, 100), 25);
  EXPECT_EQ(plan.BatchAt(0, 1000, 100), 100);
  EXPECT_EQ(plan.BatchAt(1, 0, 100), 100);
  // No batch runs past the shard's end.
  EXPECT_EQ(plan.BatchAt(1, 5900, 100), 100);
  EXPECT_EQ(plan.BatchAt(1, 5901, 100), 0);
  EXPECT_EQ(plan.BatchAt(1, 6000, 100), 0);
}

TEST(EpochPlan, AWorkerThatStartsAfterTheWarmUpHasNoRamp) {
  TrainerOptions o = Ramped();
  o.shards = 4;
  o.start_workers = 2;
  o.shard = 1;
  EXPECT_EQ(EpochPlan(o, 6000).Of(0, 100).ramp_steps, 40u);
  o.shard = 2;
  EXPECT_EQ(EpochPlan(o, 6000).Of(0, 100).ramp_steps, 0u);
  EXPECT_EQ(EpochPlan(o, 6000).BatchAt(0, 0, 100), 100);
}

TEST(EpochPlan, WhereARestartedMembersShardGoesOn) {
  const EpochPlan plan(Ramped(), 6000);
  // Inside the ramp, after it, in a later epoch, and past the last.
  EXPECT_EQ(plan.After(0, 3, 100).epoch, 0);
  EXPECT_EQ(plan.After(10, 3, 100).sample, 250u);
  const EpochPlan::Position after_ramp = plan.After(45, 3, 100);
  EXPECT_EQ(after_ramp.epoch, 0);
  EXPECT_EQ(after_ramp.sample, 1000u + 5 * 100);
  const EpochPlan::Position second = plan.After(90 + 7, 3, 100);
  EXPECT_EQ(second.epoch, 1);
  EXPECT_EQ(second.sample, 700u);
  const EpochPlan::Position done = plan.After(90 + 60 + 60, 3, 100);
  EXPECT_EQ(done.epoch, 3);
  EXPECT_EQ(done.sample, 0u);
  // Every step it names is one the plan takes: walking the epochs step by
  // step meets each position After gives.
  uint64_t steps = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (size_t at = 0;;) {
      const int batch = plan.BatchAt(epoch, at, 100);
      if (batch == 0) break;
      const EpochPlan::Position p = plan.After(steps, 2, 100);
      ASSERT_EQ(p.epoch, epoch) << steps;
      ASSERT_EQ(p.sample, at) << steps;
      at += size_t(batch);
      ++steps;
    }
  }
  EXPECT_EQ(plan.After(steps, 2, 100).epoch, 2);
}

}  // namespace
}  // namespace reckon::worker
