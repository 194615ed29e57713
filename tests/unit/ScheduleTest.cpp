// Note [Training schedule]: every "when" of a run, decided from the config and the state.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "train/loop/Schedule.h"

namespace mb::train {
namespace {

TrainerState at(std::int64_t step, std::int64_t batchInEpoch, std::int64_t badSteps = 0) {
  TrainerState state;
  state.step = step;
  state.batchInEpoch = batchInEpoch;
  state.badSteps = badSteps;
  return state;
}

TEST(Schedule, EpochsGiveTheTotalAndEvaluateAndCheckpointAtEpochEnds) {
  Config config;
  config.train.maxSteps = 0;
  config.train.epochs = 3;
  config.train.evalEvery = 0;
  config.run.checkpointEvery = 0;
  Schedule schedule(config, /*batchesPerEpoch=*/10, /*startStep=*/0, /*onGpu=*/false);
  EXPECT_EQ(schedule.totalSteps(), 30);
  Schedule::AfterStep mid = schedule.afterStep(at(5, 5));
  EXPECT_FALSE(mid.epochEnded || mid.evaluate || mid.checkpoint || mid.log || mid.last);
  Schedule::AfterStep end = schedule.afterStep(at(10, 10));
  EXPECT_TRUE(end.epochEnded && end.evaluate && end.checkpoint && end.log);
  EXPECT_FALSE(end.last);
  EXPECT_TRUE(schedule.afterStep(at(30, 10)).last);
  EXPECT_TRUE(schedule.finished(at(30, 0)));
  EXPECT_FALSE(schedule.finished(at(29, 9)));
}

TEST(Schedule, StepIntervalsAndTheLastStep) {
  Config config;
  config.train.maxSteps = 25;
  config.train.evalEvery = 10;
  config.run.checkpointEvery = 4;
  Schedule schedule(config, 100, 0, false);
  EXPECT_EQ(schedule.totalSteps(), 25);
  EXPECT_TRUE(schedule.afterStep(at(10, 10)).evaluate);
  EXPECT_FALSE(schedule.afterStep(at(10, 10)).checkpoint);
  EXPECT_TRUE(schedule.afterStep(at(12, 12)).checkpoint);
  Schedule::AfterStep last = schedule.afterStep(at(25, 25));
  EXPECT_TRUE(last.last && last.evaluate && last.checkpoint && last.log);
}

TEST(Schedule, BadStepsAndTheFinalCheckpoint) {
  Config config;
  config.train.maxSteps = 100;
  config.train.maxBadSteps = 3;
  Schedule schedule(config, 50, /*startStep=*/40, false);
  EXPECT_FALSE(schedule.tooManyBadSteps(at(41, 1, 2)));
  EXPECT_TRUE(schedule.tooManyBadSteps(at(42, 2, 3)));
  EXPECT_FALSE(schedule.needsFinalCheckpoint(at(40, 0)));  // the resumed step is on disk
  EXPECT_TRUE(schedule.needsFinalCheckpoint(at(43, 3)));
  schedule.checkpointed(43);
  EXPECT_FALSE(schedule.needsFinalCheckpoint(at(43, 3)));
}

TEST(Schedule, LogLinesAndWhenTheHostReadsTheStepChecks) {
  Config config;
  config.train.maxSteps = 100;
  config.run.logEvery = 20;
  Schedule cpu(config, 1000, 0, /*onGpu=*/false);
  EXPECT_TRUE(cpu.afterStep(at(40, 40)).log);
  EXPECT_FALSE(cpu.afterStep(at(41, 41)).log);
  EXPECT_TRUE(cpu.settleChecksEveryStep());  // host_sync auto: every step on the CPU
  EXPECT_FALSE(Schedule(config, 1000, 0, /*onGpu=*/true).settleChecksEveryStep());
  config.train.hostSync = HostSync::kStep;
  EXPECT_TRUE(Schedule(config, 1000, 0, true).settleChecksEveryStep());
}

TEST(Schedule, EarlyStoppingKeepsTheBestAndStopsAfterPatience) {
  Config config;
  config.train.maxSteps = 100;
  config.train.earlyStopping.metric = "val_loss";
  config.train.earlyStopping.patience = 2;
  config.train.earlyStopping.minDelta = 0.01;
  Schedule schedule(config, 10, 0, false);
  TrainerState state = at(10, 10);
  EXPECT_TRUE(schedule.afterEvaluation(state, {{"val_loss", 1.0}}).newBest);
  EXPECT_EQ(state.bestStep, 10);
  state.step = 20;
  Schedule::AfterEvaluation small = schedule.afterEvaluation(state, {{"val_loss", 0.995}});
  EXPECT_FALSE(small.newBest || small.stop);  // under min_delta
  state.step = 30;
  EXPECT_TRUE(schedule.afterEvaluation(state, {{"val_loss", 0.999}}).stop);
  EXPECT_EQ(state.bestMetric, 1.0);
  EXPECT_EQ(state.evalsWithoutImprovement, 2);
  EXPECT_TRUE(schedule.afterEvaluation(state, {{"val_mae", 0.5}}).metricMissing);
}

// Note [Checkpoints by time]: run.checkpoint_every_s, on a clock every checkpoint restarts.
TEST(Schedule, CheckpointsByTimeComeDueAndRestartAtEveryCheckpoint) {
  Config config;
  config.train.maxSteps = 100;
  Schedule off(config, 100, 0, false);
  EXPECT_FALSE(off.checkpointTimeDue());
  config.run.checkpointEveryS = 0.05;
  Schedule schedule(config, 100, 0, false);
  EXPECT_FALSE(schedule.checkpointTimeDue());
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_TRUE(schedule.checkpointTimeDue());
  EXPECT_FALSE(schedule.afterStep(at(7, 7)).checkpoint);  // the steps' rule is unchanged
  schedule.checkpointed(7);
  EXPECT_FALSE(schedule.checkpointTimeDue());
  EXPECT_FALSE(schedule.needsFinalCheckpoint(at(7, 7)));
}

}  // namespace
}  // namespace mb::train
