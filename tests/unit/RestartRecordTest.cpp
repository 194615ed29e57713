// Note [Restart records]: what a restarted run says about its restart, from the launcher's
// environment.
#include <gtest/gtest.h>

#include <cstdlib>

#include "train/watch/Metrics.h"
#include "train/watch/RestartRecord.h"

namespace mb::train {
namespace {

const char* const kNames[] = {"MEGABATCH_RESTART",
                              "MEGABATCH_RESTART_REASON",
                              "MEGABATCH_RESTART_RANKS_BEFORE",
                              "MEGABATCH_RESTART_LOST_HOSTS",
                              "MEGABATCH_RESTART_FAILED_STEP",
                              "MEGABATCH_RESTART_FAILED_AT"};

class RestartRecordTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name : kNames)
      unsetenv(name);
  }
};

TEST_F(RestartRecordTest, NoCounterIsNoRestart) {
  EXPECT_FALSE(restartFromEnvironment().has_value());
  setenv("MEGABATCH_RESTART_REASON", "host lost", 1);
  EXPECT_FALSE(restartFromEnvironment().has_value());  // a resume by hand is not a restart
}

TEST_F(RestartRecordTest, TheLaunchersAccountBecomesARecordAndALine) {
  setenv("MEGABATCH_RESTART", "1/2", 1);
  setenv("MEGABATCH_RESTART_REASON", "host lost", 1);
  setenv("MEGABATCH_RESTART_RANKS_BEFORE", "16", 1);
  setenv("MEGABATCH_RESTART_LOST_HOSTS", "node02", 1);
  setenv("MEGABATCH_RESTART_FAILED_STEP", "13", 1);
  setenv("MEGABATCH_RESTART_FAILED_AT", "1000.5", 1);
  const auto info = restartFromEnvironment();
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->restart, 1);
  EXPECT_EQ(info->maxRestarts, 2);
  JsonRecord record;
  const std::string line = describeRestart(*info, 10, 8, 1004.0, record);
  EXPECT_EQ(line,
            "restart 1 of 2 (host lost): 16 ranks -> 8, lost node02, resumed from step 10 (3 steps "
            "redone); 3.5 s from the failure to this run's first step");
  EXPECT_EQ(
      record.str(),
      "{\"event\":\"restart\",\"step\":10,\"restart\":1,\"max_restarts\":2,\"reason\":\"host "
      "lost\",\"ranks_before\":16,\"ranks_after\":8,\"lost_hosts\":\"node02\",\"resume_step\":"
      "10,\"failed_step\":13,\"steps_redone\":3,\"seconds_from_failure\":3.5,\"time\":1004."
      "000}");
}

TEST_F(RestartRecordTest, ASlurmRequeueSaysWhatItKnows) {
  setenv("MEGABATCH_RESTART", "3/50", 1);
  setenv("MEGABATCH_RESTART_REASON", "requeued by SLURM", 1);
  const auto info = restartFromEnvironment();
  ASSERT_TRUE(info.has_value());
  JsonRecord record;
  EXPECT_EQ(describeRestart(*info, 200, 4, 5000.0, record),
            "restart 3 of 50 (requeued by SLURM): 4 ranks, resumed from step 200");
  EXPECT_EQ(record.str().find("steps_redone"), std::string::npos);
}

}  // namespace
}  // namespace mb::train
