// ShardedData::load in one process (a world of one): window gathers against the file's rows,
// epoch coverage, eval slices, the three layouts, bf16 residency, streaming, classification.
// Data loads for test::device() with residency auto: resident on the GPU and gathered there
// under MEGABATCH_TEST_DEVICE=cuda; the host-mapping tests ask for host residency.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "data/ShardedData.h"
#include "dist/SingleCommunicator.h"
#include "tests/data/DataFiles.h"
#include "tests/support/Device.h"

namespace mb {
namespace {

using data::Split;

std::unique_ptr<data::ShardedData> load(const Config& config) {
  dist::SingleCommunicator comm;
  return data::ShardedData::load(config, comm, test::device());
}

// test::seriesConfig with residency auto: device residency on a GPU, host on the CPU.
Config residentConfig(const std::string& path, std::vector<StreamSpec> streams) {
  Config config = test::seriesConfig(path, std::move(streams));
  config.data.residency = Residency::kAuto;
  return config;
}

// Holds the HDF5 lock: a stream-residency loader thread may be reading at the same time.
at::Tensor readAll(const std::string& path, const std::string& dataset, at::ScalarType type) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::Handle file = h5::openFile(path, false, ExitCode::kData);
  return h5::readTensor(file.get(), dataset, ExitCode::kData, type);
}

// Every sample of `batch` against slices of the file (Note [Window gather]).
void expectSeriesBatch(const std::string& path, const Config& config, const data::Batch& gathered) {
  ASSERT_EQ(gathered.inputs[0].device(), test::device());
  data::Batch batch = test::toCpu(gathered);
  at::Tensor targets = readAll(path, "targets", at::kFloat);
  for (std::size_t s = 0; s < config.data.streams.size(); ++s) {
    const auto& stream = config.data.streams[s];
    at::Tensor values = readAll(path, "series/" + stream.name + "/values", at::kFloat);
    at::Tensor ends = readAll(path, "samples/end/" + stream.name, at::kLong);
    ASSERT_EQ(batch.inputs[s].size(1), stream.window);
    for (std::int64_t j = 0; j < batch.size(); ++j) {
      std::int64_t i = batch.sampleIndex[j].item<std::int64_t>();
      std::int64_t end = ends[i].item<std::int64_t>();
      at::Tensor expected = values.narrow(0, end - stream.window + 1, stream.window);
      ASSERT_TRUE(at::equal(batch.inputs[s][j], expected))
          << "stream " << stream.name << " sample " << i;
      ASSERT_EQ(batch.targets[j].item<float>(), targets[i].item<float>());
    }
  }
}

class DataLoad : public ::testing::Test {
 protected:
  test::TempDir dir_;
};

TEST_F(DataLoad, SeriesWindowsAreTheFileRows) {
  std::string path = dir_.file("s.h5");
  test::writeSeriesFile(path, {});
  Config config = residentConfig(path, {{"m1", 30}, {"m5", 8}});
  auto data = load(config);
  // m5 window 8 needs end row >= 7, i.e. finest row >= 39: the first 39 samples are skipped.
  EXPECT_EQ(data->info().split(Split::kTrain).begin, 39);
  EXPECT_EQ(data->info().inputs.size(), 2u);
  data->beginEpoch(0);
  for (std::int64_t b : {std::int64_t{0}, std::int64_t{5}, data->batchesPerEpoch() - 1}) {
    data::Batch batch = data->trainBatch(b, 0, data->localCount(b), at::kFloat);
    auto expected = data->order().batchItems(0, b);
    ASSERT_EQ(batch.size(), static_cast<std::int64_t>(expected.size()));
    for (std::size_t j = 0; j < expected.size(); ++j)
      EXPECT_EQ(batch.sampleIndex[j].item<std::int64_t>(),
                expected[j] + data->info().split(Split::kTrain).begin);
    expectSeriesBatch(path, config, batch);
  }
  // Resident memory is the series, not windows x samples.
  std::int64_t windows = data->info().split(Split::kTrain).size() * (30 + 8) * 3 * 4;
  EXPECT_LT(data->residentBytes(), windows / 4);
}

TEST_F(DataLoad, EpochCoversTrainOnceAndMicroBatchesSlice) {
  std::string path = dir_.file("s.h5");
  test::writeSeriesFile(path, {});
  Config config = residentConfig(path, {{"m1", 4}});
  auto data = load(config);
  auto train = data->info().split(Split::kTrain);
  for (std::int64_t epoch : {0, 1}) {
    data->beginEpoch(epoch);
    std::vector<std::int64_t> seen;
    for (std::int64_t b = 0; b < data->batchesPerEpoch(); ++b) {
      std::int64_t n = data->localCount(b);
      EXPECT_EQ(n, data->globalCount(b));  // one rank holds everything
      data::Batch whole = data->trainBatch(b, 0, n, at::kFloat);
      data::Batch tail = data->trainBatch(b, n / 2, n, at::kFloat);
      EXPECT_TRUE(at::equal(tail.sampleIndex, whole.sampleIndex.narrow(0, n / 2, n - n / 2)));
      for (std::int64_t j = 0; j < n; ++j)
        seen.push_back(whole.sampleIndex[j].item<std::int64_t>());
    }
    std::sort(seen.begin(), seen.end());
    std::vector<std::int64_t> expected(train.size());
    std::iota(expected.begin(), expected.end(), train.begin);
    EXPECT_EQ(seen, expected) << "epoch " << epoch;
  }
  EXPECT_THROW(data->trainBatch(0, 0, data->localCount(0) + 1, at::kFloat), Error);
}

TEST_F(DataLoad, EvalSlicesAreContiguousAndEmbargoed) {
  std::string path = dir_.file("s.h5");
  test::writeSeriesFile(path, {});
  Config config = residentConfig(path, {{"m1", 10}, {"m5", 3}});
  auto data = load(config);
  const auto& info = data->info();
  // No window of a val sample shares a row with the last train sample's windows.
  at::Tensor m5 = readAll(path, "samples/end/m5", at::kLong);
  std::int64_t lastTrain = info.split(Split::kTrain).end - 1,
               firstVal = info.split(Split::kVal).begin;
  EXPECT_GT(m5[firstVal].item<std::int64_t>() - 3 + 1, m5[lastTrain].item<std::int64_t>());
  EXPECT_LE(m5[firstVal - 1].item<std::int64_t>() - 3 + 1,
            m5[lastTrain].item<std::int64_t>());  // and no more is skipped
  for (Split split : {Split::kVal, Split::kTest}) {
    std::int64_t n = data->evalCount(split);
    EXPECT_EQ(n, info.split(split).size());
    data::Batch batch = data->evalBatch(split, 3, 11, at::kFloat);
    EXPECT_TRUE(at::equal(
        batch.sampleIndex.cpu(),
        at::arange(info.split(split).begin + 3, info.split(split).begin + 11, at::kLong)));
    expectSeriesBatch(path, config, batch);
  }
}

TEST_F(DataLoad, Bf16ResidencyRoundsTheValues) {
  std::string path = dir_.file("s.h5");
  test::writeSeriesFile(path, {});
  Config config = residentConfig(path, {{"m1", 5}});
  config.data.residentDtype = DType::kBf16;
  auto data = load(config);
  data->beginEpoch(0);
  data::Batch bf16 = data->trainBatch(0, 0, 4, at::kBFloat16);
  data::Batch fp32 = data->trainBatch(0, 0, 4, at::kFloat);
  EXPECT_EQ(bf16.inputs[0].scalar_type(), at::kBFloat16);
  EXPECT_EQ(fp32.inputs[0].scalar_type(), at::kFloat);
  at::Tensor values = readAll(path, "series/m1/values", at::kFloat);
  at::Tensor ends = readAll(path, "samples/end/m1", at::kLong);
  std::int64_t i = bf16.sampleIndex[0].item<std::int64_t>();
  at::Tensor expected = values.narrow(0, ends[i].item<std::int64_t>() - 4, 5).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(bf16.inputs[0][0].cpu(), expected));
}

TEST_F(DataLoad, SamplesLayoutWithWindowsAndPlainRows) {
  for (std::int64_t window : {0, 6}) {
    std::string path = dir_.file("samples" + std::to_string(window) + ".h5");
    test::writeSamplesFile(path, 500, window, 3,
                           at::arange(500, at::kFloat).view({500, 1}).repeat({1, 2}));
    Config config;
    config.data.path = path;
    config.data.canonicalShards = 8;
    config.train.globalBatch = 32;
    auto data = load(config);
    const auto& info = data->info();
    EXPECT_EQ(info.targetShape, std::vector<std::int64_t>{2});
    EXPECT_EQ(info.inputs[0].window, window);
    EXPECT_EQ(info.split(Split::kVal).begin - info.split(Split::kTrain).end,
              window);  // embargo = T samples
    data->beginEpoch(0);
    data::Batch batch = test::toCpu(data->trainBatch(1, 0, data->localCount(1), at::kFloat));
    at::Tensor features = readAll(path, "features", at::kFloat);
    EXPECT_TRUE(at::equal(batch.inputs[0], features.index_select(0, batch.sampleIndex)));
    EXPECT_TRUE(at::equal(batch.targets.select(1, 0), batch.sampleIndex.to(at::kFloat)));
  }
}

TEST_F(DataLoad, TokensAreContextPlusOneWindows) {
  for (at::ScalarType type : {at::kByte, at::kShort, at::kInt}) {
    std::string path = dir_.file("t.h5");
    test::writeTokensFile(path, 1001, 97, type);
    Config config;
    config.data.path = path;
    config.data.layout = "tokens";
    config.data.context = 10;
    config.data.canonicalShards = 4;
    config.train.globalBatch = 8;
    config.model.kind = "gpt";
    auto data = load(config);
    EXPECT_EQ(data->info().numSamples, 100);
    EXPECT_EQ(data->info().vocabSize, 97);
    EXPECT_EQ(data->info().split(Split::kVal).begin, data->info().split(Split::kTrain).end + 1);
    data->beginEpoch(0);
    data::Batch batch = test::toCpu(data->trainBatch(0, 0, 8, at::kFloat));
    for (std::int64_t j = 0; j < 8; ++j) {
      std::int64_t item = batch.sampleIndex[j].item<std::int64_t>();
      at::Tensor expected = at::arange(item * 10, item * 10 + 11, at::kLong).remainder(97);
      EXPECT_TRUE(at::equal(batch.inputs[0][j], expected.narrow(0, 0, 10)));
      EXPECT_TRUE(at::equal(batch.targets[j], expected.narrow(0, 1, 10)));
    }
  }
}

TEST_F(DataLoad, StreamResidencyFollowsTheChunkMajorOrder) {
  std::string path = dir_.file("s.h5");
  test::writeSeriesFile(path, {});
  Config config = residentConfig(path, {{"m1", 6}, {"m5", 2}});
  config.data.residency = Residency::kStream;
  config.data.streamChunkItems = 37;
  auto data = load(config);
  EXPECT_EQ(data->order().chunkItems(), 37);
  auto begin = data->info().split(Split::kTrain).begin;
  for (std::int64_t epoch : {0, 1}) {
    data->beginEpoch(epoch);
    for (std::int64_t b = 0; b < data->batchesPerEpoch(); ++b) {
      data::Batch batch = data->trainBatch(b, 0, data->localCount(b), at::kFloat);
      auto expected = data->order().batchItems(epoch, b);
      for (std::size_t j = 0; j < expected.size(); ++j)
        ASSERT_EQ(batch.sampleIndex[j].item<std::int64_t>(), expected[j] + begin) << "batch " << b;
      if (b % 17 == 0) expectSeriesBatch(path, config, batch);
    }
  }
  // Going back (a resumed run re-reading an earlier batch) restarts the stream.
  data::Batch again = data->trainBatch(3, 0, data->localCount(3), at::kFloat);
  auto expected = data->order().batchItems(1, 3);
  EXPECT_EQ(again.sampleIndex[0].item<std::int64_t>(), expected[0] + begin);
  expectSeriesBatch(path, config, again);
}

TEST_F(DataLoad, ClassificationLabelsAndClassCount) {
  std::string path = dir_.file("c.h5");
  test::writeSamplesFile(path, 300, 0, 2, at::arange(300, at::kLong).remainder(7));
  Config config;
  config.data.path = path;
  config.data.canonicalShards = 2;
  config.model.task = Task::kClassification;
  auto data = load(config);
  EXPECT_TRUE(data->info().integerTargets);
  EXPECT_EQ(data->info().numClasses, 7);
  data->beginEpoch(0);
  data::Batch batch = data->trainBatch(0, 0, 5, at::kFloat);
  EXPECT_EQ(batch.targets.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(batch.targets, batch.sampleIndex.remainder(7)));
}

TEST_F(DataLoad, ErrorsNameTheFileDatasetAndValues) {
  std::string path = dir_.file("bad.h5");
  test::writeSamplesFile(path, 100, 0, 2, at::arange(90, at::kFloat));
  Config config;
  config.data.path = path;
  config.data.canonicalShards = 2;
  try {
    load(config);
    FAIL() << "expected a DataError";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find("/targets: expected N = 100"), std::string::npos)
        << e.what();
  }
  test::writeSamplesFile(path, 100, 0, 2, at::arange(100, at::kFloat));
  config.data.canonicalShards = 81;  // train has 80 samples
  try {
    load(config);
    FAIL() << "expected a DataError";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find("fewer than data.canonical_shards = 81"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mb

namespace mb {
namespace {

TEST_F(DataLoad, HostMappingGivesTheSameBatchesAsReading) {
  std::string path = dir_.file("s.h5");
  test::writeSeriesFile(path, {});
  Config config = test::seriesConfig(path, {{"m1", 7}, {"m5", 3}});
  auto mapped = load(config);
  config.data.hostMmap = false;
  auto copied = load(config);
  EXPECT_GT(mapped->loadStats().bytesMapped, 0);
  EXPECT_LT(mapped->loadStats().bytesRead,
            copied->loadStats().bytesRead);  // int32 end rows are read
  EXPECT_EQ(copied->loadStats().bytesMapped, 0);
  mapped->beginEpoch(2);
  copied->beginEpoch(2);
  for (std::int64_t b = 0; b < mapped->batchesPerEpoch(); b += 7) {
    data::Batch a = mapped->trainBatch(b, 0, mapped->localCount(b), at::kFloat);
    data::Batch c = copied->trainBatch(b, 0, copied->localCount(b), at::kFloat);
    for (std::size_t i = 0; i < a.inputs.size(); ++i)
      EXPECT_TRUE(at::equal(a.inputs[i], c.inputs[i]));
    EXPECT_TRUE(at::equal(a.targets, c.targets));
  }
  data::Batch a = mapped->evalBatch(Split::kTest, 0, 9, at::kFloat);
  data::Batch c = copied->evalBatch(Split::kTest, 0, 9, at::kFloat);
  EXPECT_TRUE(at::equal(a.inputs[0], c.inputs[0]));
}

TEST_F(DataLoad, ChunkedCompressedAndBf16AreReadNotMapped) {
  std::string path = dir_.file("s.h5");
  test::SeriesSpec spec;
  spec.write.gzipLevel = 4;
  spec.write.chunkRows = 64;
  test::writeSeriesFile(path, spec);
  Config config = test::seriesConfig(path, {{"m1", 5}});
  EXPECT_EQ(load(config)->loadStats().bytesMapped, 0);
  test::writeSeriesFile(path, {});
  config.data.residentDtype = DType::kBf16;
  auto bf16 = load(config);
  EXPECT_GT(bf16->loadStats().bytesRead, 0);    // values: bf16 differs from the file's float32
  EXPECT_GT(bf16->loadStats().bytesMapped, 0);  // ends and targets still map
}

TEST_F(DataLoad, RewritingAMappedFileEndsWithAMessageNotACrash) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::string path = dir_.file("s.h5");
  test::writeSeriesFile(path, {});
  Config config = test::seriesConfig(path, {{"m1", 5}});
  auto data = load(config);
  data->beginEpoch(0);
  std::filesystem::resize_file(path, 0);  // what h5py.File(path, "w") does first
  EXPECT_EXIT(
      {
        for (std::int64_t b = 0; b < data->batchesPerEpoch(); ++b)
          data->trainBatch(b, 0, data->localCount(b), at::kFloat);
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "truncated or rewritten");
}

}  // namespace
}  // namespace mb
