// Note [Zero-copy host residency] against raw data that HDF5 placed at an offset that is not a
// multiple of the element size (found by the data schema fuzzer: int64 labels mapped at an
// address 4 bytes off, a misaligned load under UBSan).
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "common/Hdf5.h"
#include "data/ShardedData.h"
#include "data/pipeline/MappedFile.h"
#include "dist/SingleCommunicator.h"
#include "tests/support/Device.h"
#include "tests/support/TempDir.h"

namespace mb {
namespace {

haddr_t offsetOf(hid_t file, const std::string& dataset) {
  h5::Handle handle = h5::openDataset(file, dataset, ExitCode::kData);
  return H5Dget_offset(handle.get());
}

// A samples file whose int64 labels start at an odd-multiple-of-4 offset: a uint8 dataset of
// `pad` bytes precedes them. Returns the labels' offset.
haddr_t writeFile(const std::string& path, std::int64_t pad) {
  h5::Handle file = h5::createFile(path, false, ExitCode::kFailure);
  h5::writeTensor(file.get(), "pad", at::zeros({pad}, at::kByte), {}, ExitCode::kFailure);
  h5::writeTensor(file.get(), "features", at::arange(40, at::kFloat).view({20, 2}), {},
                  ExitCode::kFailure);
  h5::writeTensor(file.get(), "targets", at::arange(20, at::kLong).remainder(3), {},
                  ExitCode::kFailure);
  return offsetOf(file.get(), "targets");
}

class MappedFile : public ::testing::Test {
 protected:
  // Writes the file with the first pad that misaligns the labels.
  void SetUp() override {
    for (std::int64_t pad = 1; pad <= 8; ++pad) {
      if (writeFile(path_, pad) % 8 != 0) return;
    }
    FAIL() << "could not place /targets at a misaligned offset";
  }

  test::TempDir dir_;
  std::string path_ = dir_.file("d.h5");
};

TEST_F(MappedFile, MisalignedDatasetIsReadNotMapped) {
  h5::Handle file = h5::openFile(path_, false, ExitCode::kData);
  EXPECT_FALSE(data::mappableOffset(file.get(), "targets", at::kLong).has_value());
  EXPECT_TRUE(data::mappableOffset(file.get(), "pad", at::kByte).has_value());
}

TEST_F(MappedFile, MisalignedLabelsLoadAsTheFileHoldsThem) {
  Config config;
  config.data.path = path_;
  config.data.hostMmap = true;
  config.data.residency = Residency::kHost;
  config.data.canonicalShards = 2;
  config.data.split.trainFraction = 0.5;
  config.data.split.valFraction = 0.25;
  config.data.split.testFraction = 0.25;
  config.data.split.embargo = 0;
  config.model.task = Task::kClassification;
  config.train.globalBatch = 4;
  dist::SingleCommunicator comm;
  // Mapped on the host, trained on test::device(): the batch is copied there.
  auto data = data::ShardedData::load(config, comm, test::device());
  EXPECT_EQ(data->info().numClasses, 3);
  data::Batch batch = data->evalBatch(data::Split::kTest, 0, 5, at::kFloat);
  EXPECT_EQ(batch.targets.device(), test::device());
  at::Tensor expected = at::arange(15, 20, at::kLong).remainder(3);
  EXPECT_TRUE(at::equal(batch.targets.cpu(), expected)) << batch.targets;
}

}  // namespace
}  // namespace mb
