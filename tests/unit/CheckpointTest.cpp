// Checkpoint files: round trip, corruption detection (truncation, flipped bits), fallback
// to the previous complete checkpoint, `latest`, keep_last, and atomic writes. The tensors
// are made on test::device(): a checkpoint of CUDA tensors reads back as the same CPU values.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <ATen/Functions.h>
#include <hdf5.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "tests/support/Device.h"
#include "tests/support/TempDir.h"
#include "train/checkpoints/Checkpoint.h"
#include "train/checkpoints/CheckpointDirectory.h"

namespace mb::train {
namespace {
namespace fs = std::filesystem;

class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mb-ckpt-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    test::removeTree(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { test::removeTree(dir_); }

  static CheckpointContent content(std::int64_t step) {
    const auto on = at::TensorOptions().device(test::device());
    CheckpointContent c;
    c.trainer.step = step;
    c.trainer.epoch = 2;
    c.trainer.batchInEpoch = 7;
    c.trainer.canonicalShards = 16;
    c.trainer.seed = 99;
    c.trainer.globalBatch = 128;
    c.trainer.bestMetric = 0.25;
    c.model = {
        {"encoders.m1.weight_ih_l0", at::arange(12, on.dtype(at::kFloat)).reshape({3, 4}) * step},
        {"head.bias", at::full({3}, 0.5f, on)},
        {"big", at::randn({512, 512}, on)}};
    c.optimizer = {{"head.bias/exp_avg", at::full({3}, 1.5f, on)},
                   {"head.bias/exp_avg_sq", at::full({3}, 2.5f, on)}};
    c.optimizerSteps = step;
    c.optimizerKind = "adamw";
    c.configYaml = "optim:\n  lr: 0.001\n";
    c.dataFingerprint = "abc";
    c.lr = 1e-3;
    c.worldSize = 4;
    return c;
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(CheckpointFiles, RoundTripKeepsEveryField) {
  CheckpointContent written = content(20);
  writeCheckpointFile(path("a.h5"), written);
  EXPECT_FALSE(fs::exists(path("a.h5.tmp")));
  CheckpointContent read = readCheckpointFile(path("a.h5"));
  EXPECT_EQ(read.trainer.step, 20);
  EXPECT_EQ(read.trainer.batchInEpoch, 7);
  EXPECT_EQ(read.trainer.canonicalShards, 16);
  EXPECT_DOUBLE_EQ(read.trainer.bestMetric, 0.25);
  EXPECT_EQ(read.worldSize, 4);
  EXPECT_EQ(read.configYaml, written.configYaml);
  EXPECT_EQ(read.optimizerKind, "adamw");
  ASSERT_EQ(read.model.size(), written.model.size());
  for (const auto& [name, tensor] : written.model) {
    bool found = false;
    for (const auto& [readName, readTensor] : read.model) {
      if (readName != name) continue;
      found = true;
      EXPECT_TRUE(readTensor.device().is_cpu()) << name;
      EXPECT_TRUE(at::equal(readTensor, tensor.cpu())) << name;
    }
    EXPECT_TRUE(found) << name;
  }
  ASSERT_EQ(read.optimizer.size(), 2u);
  EXPECT_TRUE(isCheckpointFile(path("a.h5")));
  EXPECT_NE(describeCheckpoint(path("a.h5")).find("step 20"), std::string::npos);
}

TEST_F(CheckpointFiles, TruncatedFileIsDetected) {
  writeCheckpointFile(path("t.h5"), content(5));
  fs::resize_file(path("t.h5"), fs::file_size(path("t.h5")) / 2);
  try {
    readCheckpointFile(path("t.h5"));
    FAIL() << "a truncated checkpoint must not load";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("t.h5"), std::string::npos) << error.what();
  }
}

// Flips one bit inside the raw data of dataset `name` (located with H5Dget_chunk_info).
void flipBitInDataset(const std::string& file, const std::string& name) {
  haddr_t address = 0;
  {
    h5::Handle f = h5::openFile(file, false, ExitCode::kCheckpoint);
    h5::Handle d = h5::openDataset(f.get(), name, ExitCode::kCheckpoint);
    hsize_t size = 0;
    unsigned mask = 0;
    h5::Handle space(H5Dget_space(d.get()), H5Sclose);
    ASSERT_GE(H5Dget_chunk_info(d.get(), space.get(), 0, nullptr, &mask, &address, &size), 0);
    address += size / 2;
  }
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(address));
  char byte = 0;
  io.read(&byte, 1);
  byte ^= 0x10;
  io.seekp(static_cast<std::streamoff>(address));
  io.write(&byte, 1);
}

TEST_F(CheckpointFiles, FlippedBitIsDetected) {
  writeCheckpointFile(path("f.h5"), content(5));
  flipBitInDataset(path("f.h5"), "model/big");
  EXPECT_THROW(readCheckpointFile(path("f.h5")), CheckpointError);
}

// A group linked into itself (by hand or by a broken tool) made readNamed recurse until the
// stack overflowed; it is a corrupt checkpoint.
TEST_F(CheckpointFiles, GroupCycleIsACheckpointErrorNotAStackOverflow) {
  writeCheckpointFile(path("c.h5"), content(5));
  {
    h5::Handle file = h5::openFile(path("c.h5"), true, ExitCode::kCheckpoint);
    ASSERT_GE(H5Lcreate_hard(file.get(), "optimizer", file.get(), "optimizer/head.bias/again",
                             H5P_DEFAULT, H5P_DEFAULT),
              0);
  }
  try {
    readCheckpointFile(path("c.h5"));
    ADD_FAILURE() << "expected a CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(e.message().find("linked more than once"), std::string::npos) << e.message();
  }
}

TEST_F(CheckpointFiles, DirectoryFallsBackToPreviousCompleteCheckpoint) {
  CheckpointDirectory checkpoints(dir_.string(), 5);
  checkpoints.save(content(10));
  checkpoints.save(content(20));
  std::string newest = checkpoints.save(content(30));
  std::ifstream latest((dir_ / "checkpoints" / "latest").string());
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step-00000030.h5");

  flipBitInDataset(newest, "model/big");
  auto loaded = checkpoints.loadNewest();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->second.trainer.step, 20);
  EXPECT_NE(loaded->first.find("step-00000020.h5"), std::string::npos);

  fs::resize_file(loaded->first, 100);  // now the step-20 file is truncated too
  loaded = checkpoints.loadNewest();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->second.trainer.step, 10);
}

TEST_F(CheckpointFiles, NoCheckpointsMeansFreshStartButAllCorruptIsAnError) {
  CheckpointDirectory checkpoints(dir_.string(), 3);
  EXPECT_FALSE(checkpoints.loadNewest().has_value());
  std::string only = checkpoints.save(content(1));
  fs::resize_file(only, 10);
  EXPECT_THROW(checkpoints.loadNewest(), CheckpointError);
}

TEST_F(CheckpointFiles, KeepLastPrunesOldStepsAndKeepsBest) {
  CheckpointDirectory checkpoints(dir_.string(), 2);
  for (int step : {1, 2, 3, 4})
    checkpoints.save(content(step));
  checkpoints.saveBest(content(2));
  std::vector<std::string> files = checkpoints.stepFiles();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_NE(files[0].find("step-00000004.h5"), std::string::npos);
  EXPECT_NE(files[1].find("step-00000003.h5"), std::string::npos);
  EXPECT_EQ(readCheckpointFile(checkpoints.bestPath()).trainer.step, 2);
  for (const auto& entry : fs::directory_iterator(dir_ / "checkpoints"))
    EXPECT_EQ(entry.path().extension() == ".tmp", false) << entry.path();
}

TEST_F(CheckpointFiles, UnfinishedWritesOfAKilledRunAreRemoved) {
  CheckpointDirectory checkpoints(dir_.string(), 3);
  std::string good = checkpoints.save(content(2));
  // What a rank killed in the middle of writing step 4 leaves: a partial file and a partial
  // `latest`.
  std::string partial = checkpoints.stepPath(4) + ".tmp";
  fs::copy_file(good, partial);
  fs::resize_file(partial, 100);
  std::ofstream(checkpoints.path() + "/latest.tmp") << "step-000";
  std::vector<std::string> removed = checkpoints.removeUnfinishedWrites();
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_FALSE(fs::exists(partial));
  EXPECT_FALSE(fs::exists(checkpoints.path() + "/latest.tmp"));
  EXPECT_TRUE(fs::exists(good));
  EXPECT_EQ(checkpoints.loadNewest()->second.trainer.step, 2);
}

TEST_F(CheckpointFiles, UnwritableDirectoryIsACheckpointError) {
  CheckpointContent c = content(1);
  EXPECT_THROW(writeCheckpointFile((dir_ / "missing" / "x.h5").string(), c), CheckpointError);
}

}  // namespace
}  // namespace mb::train
