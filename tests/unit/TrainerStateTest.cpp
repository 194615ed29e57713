// Note [Trainer state table]: the table describes every field of TrainerState, and every field
// survives a checkpoint file and the resume broadcast's packing.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "tests/support/TempDir.h"
#include "train/checkpoints/Checkpoint.h"
#include "train/loop/TrainerState.h"

namespace mb::train {
namespace {

std::size_t offsetOf(const TrainerStateField& field) {
  static const TrainerState probe;
  const void* member = field.integer != nullptr ? static_cast<const void*>(&(probe.*field.integer))
                                                : static_cast<const void*>(&(probe.*field.real));
  return static_cast<std::size_t>(static_cast<const char*>(member) -
                                  reinterpret_cast<const char*>(&probe));
}

// A state whose every field holds a value unlike its default and unlike every other field's.
TrainerState distinctState() {
  TrainerState state;
  std::int64_t next = 1000;
  for (const TrainerStateField& field : trainerStateFields()) {
    if (field.integer != nullptr) {
      state.*field.integer = next++;
    } else {
      state.*field.real = 0.5 + static_cast<double>(next++);
    }
  }
  return state;
}

void expectSameState(const TrainerState& expected, const TrainerState& actual) {
  for (const TrainerStateField& field : trainerStateFields()) {
    if (field.integer != nullptr) {
      EXPECT_EQ(expected.*field.integer, actual.*field.integer) << field.name;
    } else {
      EXPECT_EQ(expected.*field.real, actual.*field.real) << field.name;
    }
  }
}

TEST(TrainerStateTable, CoversEveryByteOfTheStructExactlyOnce) {
  std::vector<bool> covered(sizeof(TrainerState), false);
  std::set<std::string> names;
  for (const TrainerStateField& field : trainerStateFields()) {
    ASSERT_TRUE((field.integer == nullptr) != (field.real == nullptr))
        << field.name << ": exactly one of `integer` and `real` must be set";
    EXPECT_TRUE(names.insert(field.name).second) << "two fields are named " << field.name;
    const std::size_t begin = offsetOf(field);
    for (std::size_t byte = begin; byte < begin + 8; ++byte) {
      ASSERT_FALSE(covered[byte]) << field.name << " shares its member with another entry";
      covered[byte] = true;
    }
  }
  for (std::size_t byte = 0; byte < covered.size(); ++byte)
    ASSERT_TRUE(covered[byte])
        << "byte " << byte << " of TrainerState belongs to no entry of trainerStateFields(): a "
        << "field was added to the struct but not to the table (src/train/loop/TrainerState.cpp)";
}

TEST(TrainerStateTable, EveryFieldRoundTripsThroughTheBroadcastPacking) {
  const TrainerState state = distinctState();
  expectSameState(state, unpackTrainerState(packTrainerState(state)));
  TrainerState nan;
  nan.bestMetric = std::nan("");  // the default: no best yet
  EXPECT_TRUE(std::isnan(unpackTrainerState(packTrainerState(nan)).bestMetric));
}

TEST(TrainerStateTable, EveryFieldRoundTripsThroughACheckpointFile) {
  test::TempDir dir;
  CheckpointContent content;
  content.trainer = distinctState();
  content.configYaml = "optim:\n  lr: 0.001\n";
  content.optimizerKind = "adamw";
  writeCheckpointFile(dir.file("state.h5"), content);
  expectSameState(content.trainer, readCheckpointFile(dir.file("state.h5")).trainer);
}

}  // namespace
}  // namespace mb::train
