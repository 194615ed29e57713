// Multi-rank data loading (run under mpirun -np 1, 2, 4): collective MPI-IO reads equal a
// serial read of the same rows byte for byte, for float16/32/64 sources into fp32 and bf16,
// with uneven, empty, and multi-piece ranges; and ShardedData::load gives each rank exactly
// its share of the W=1 batches with the file's rows, resident on the host or on
// test::device() (Note [Test device]).
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "data/ShardedData.h"
#include "data/pipeline/Reader.h"
#include "dist/ParallelIo.h"
#include "tests/data/DataFiles.h"
#include "tests/mpi/MpiTestMain.h"
#include "tests/support/Device.h"
#include "tests/support/TempDir.h"

namespace mb {
namespace {

// A directory every rank sees (rank 0 names it after its pid).
std::string sharedDir() {
  auto& comm = test::runtime().control();
  at::Tensor pid = at::full({1}, static_cast<std::int64_t>(::getpid()), at::kLong);
  comm.broadcast(pid, 0);
  std::string dir = "/tmp/mb-mpi-data-" + std::to_string(pid.item<std::int64_t>());
  if (comm.rank() == 0) std::filesystem::create_directories(dir);
  comm.barrier();
  return dir;
}

void removeShared(const std::string& dir) {
  auto& comm = test::runtime().control();
  comm.barrier();
  if (comm.rank() == 0) test::removeTree(dir);
}

// Rank r reads rows [r*r*n/W^2 ...): uneven, and rank 1 of 2+ reads nothing.
std::vector<data::ItemRange> unevenRanges(std::int64_t n, int world) {
  std::vector<data::ItemRange> ranges;
  std::int64_t begin = 0;
  for (int r = 0; r < world; ++r) {
    std::int64_t end = r == world - 1 ? n : begin + (r == 1 ? 0 : n * (r + 1) / (2 * world));
    ranges.push_back({begin, end});
    begin = end;
  }
  return ranges;
}

TEST(DataRead, CollectiveReadsEqualSerialReadsByteForByte) {
  auto& comm = test::runtime().control();
  std::string dir = sharedDir();
  const std::int64_t n = 1234, f = 7;
  std::vector<at::ScalarType> sources{at::kHalf, at::kFloat, at::kDouble};
  if (comm.rank() == 0) {
    for (std::size_t k = 0; k < sources.size(); ++k) {
      h5::Handle file =
          h5::createFile(dir + "/f" + std::to_string(k) + ".h5", false, ExitCode::kFailure);
      at::Tensor values = at::randn({n, f}, at::kDouble).mul(100).to(sources[k]);
      h5::WriteOptions chunked;
      chunked.chunkRows = 100;
      chunked.gzipLevel = k == 1 ? 4 : 0;
      h5::writeTensor(file.get(), "x", values, k == 0 ? h5::WriteOptions{} : chunked,
                      ExitCode::kFailure);
    }
  }
  comm.barrier();
  auto ranges = unevenRanges(n, comm.size());
  const auto& mine = ranges[comm.rank()];
  for (std::size_t k = 0; k < sources.size(); ++k) {
    std::string path = dir + "/f" + std::to_string(k) + ".h5";
    at::Tensor fp32 = at::empty({mine.size(), f}, at::kFloat);
    at::Tensor bf16 = at::empty({mine.size(), f}, at::kBFloat16);
    {
      dist::ParallelIo io(comm);
      EXPECT_EQ(io.collective(), comm.size() > 1);
      h5::Handle file = h5::openFile(path, false, ExitCode::kData, io.fileAccess());
      // Pieces of ~1 KiB: several pieces per rank, and different counts on different ranks.
      data::RowReader reader(file.get(), io.transfer(), io.collective(), 1024);
      reader.read("x", ranges, comm.rank(), fp32);
      reader.read("x", ranges, comm.rank(), bf16);
      file.close(ExitCode::kData, path);
      reader.throwIfFailed();
    }
    h5::Handle serial = h5::openFile(path, false, ExitCode::kData);
    h5::Handle dataset = h5::openDataset(serial.get(), "x", ExitCode::kData);
    at::Tensor expected =
        h5::readRows(dataset.get(), mine.begin, mine.end, at::kFloat, ExitCode::kData, path);
    EXPECT_TRUE(at::equal(fp32, expected))
        << "source " << c10::toString(sources[k]) << " rank " << comm.rank();
    EXPECT_TRUE(at::equal(bf16, expected.to(at::kBFloat16)))
        << "bf16 from " << c10::toString(sources[k]);
  }
  removeShared(dir);
}

// Collective reads (host_mmap off) and zero-copy mappings (on) give the same shares, for
// training on test::device() with the rows resident on the host or on that device.
void checkShares(bool hostMmap, Residency residency) {
  auto& comm = test::runtime().control();
  std::string dir = sharedDir();
  std::string path = dir + "/series.h5";
  if (comm.rank() == 0) test::writeSeriesFile(path, {});
  comm.barrier();
  Config config = test::seriesConfig(path, {{"m1", 12}, {"m5", 4}});
  config.data.canonicalShards = 8;
  config.train.globalBatch = 24;
  config.data.hostMmap = hostMmap;
  config.data.residency = residency;
  auto data = data::ShardedData::load(config, comm, test::device());
  EXPECT_EQ(data->loadStats().residency, residency);
  // Only a host store maps the file (a CPU "device" store is host memory too).
  bool hostStore = residency == Residency::kHost || !test::onCuda();
  EXPECT_EQ(data->loadStats().bytesMapped > 0, hostMmap && hostStore);
  EXPECT_EQ(data->loadStats().io,
            comm.size() > 1 ? "MPI-IO, collective transfers" : "sec2, independent transfers");
  const auto& order = data->order();
  std::int64_t trainBegin = data->info().split(data::Split::kTrain).begin;
  data::ItemRange own =
      order.itemsOfShards(data::GlobalOrder::shardsOfRank(8, comm.rank(), comm.size()));
  h5::Handle file = h5::openFile(path, false, ExitCode::kData);
  at::Tensor values = h5::readTensor(file.get(), "series/m1/values", ExitCode::kData, at::kFloat);
  at::Tensor ends = h5::readTensor(file.get(), "samples/end/m1", ExitCode::kData, at::kLong);
  data->beginEpoch(1);
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < data->batchesPerEpoch(); ++b) {
    data::Batch gathered = data->trainBatch(b, 0, data->localCount(b), at::kFloat);
    if (gathered.size() > 0) {
      ASSERT_EQ(gathered.inputs[0].device(), test::device());
    }
    data::Batch batch = test::toCpu(gathered);
    std::vector<std::int64_t> expected;
    for (auto item : order.batchItems(1, b)) {
      if (item >= own.begin && item < own.end) expected.push_back(item + trainBegin);
    }
    ASSERT_EQ(batch.size(), static_cast<std::int64_t>(expected.size()));
    for (std::int64_t j = 0; j < batch.size(); ++j) {
      std::int64_t i = batch.sampleIndex[j].item<std::int64_t>();
      ASSERT_EQ(i, expected[j]);
      at::Tensor window = values.narrow(0, ends[i].item<std::int64_t>() - 11, 12);
      ASSERT_TRUE(at::equal(batch.inputs[0][j], window)) << "sample " << i;
    }
    at::Tensor count = at::full({1}, batch.size(), at::kLong);
    comm.allReduce(count, dist::ReduceOp::kSum);
    EXPECT_EQ(count.item<std::int64_t>(), data->globalCount(b));
    total += batch.size();
  }
  EXPECT_EQ(total, own.size());
  data.reset();
  file.reset();
  removeShared(dir);
}

TEST(DataRead, EachRankHoldsItsShareOfTheSingleRankBatches) {
  checkShares(false, Residency::kHost);
  checkShares(true, Residency::kHost);
  checkShares(false, Residency::kDevice);
}

}  // namespace
}  // namespace mb
