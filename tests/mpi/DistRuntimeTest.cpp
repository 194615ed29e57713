// Runtime topology helpers: local rank, device selection (local rank % visible GPUs, a rank
// without a GPU is an error on every rank), CPU threads per rank, and the data communicator.
#include <algorithm>
#include <thread>

#include <gtest/gtest.h>

#include "common/Error.h"
#include "tests/mpi/MpiTestMain.h"

namespace mb {
namespace {

TEST(DistRuntime, OneNodeMeansLocalRankIsRank) {
  auto& runtime = test::runtime();
  // CTest runs every rank on this machine.
  EXPECT_EQ(runtime.topology().localRank, runtime.rank());
  EXPECT_EQ(runtime.topology().localSize, runtime.size());
  EXPECT_FALSE(runtime.topology().host.empty());
}

TEST(DistRuntime, DeviceIsLocalRankModuloVisibleGpus) {
  auto& runtime = test::runtime();
  EXPECT_EQ(runtime.selectCudaDevice(2), runtime.topology().localRank % 2);
  EXPECT_EQ(runtime.selectCudaDevice(8), runtime.topology().localRank % 8);
}

TEST(DistRuntime, NoVisibleGpuIsAConfigErrorOnEveryRank) {
  auto& runtime = test::runtime();
  int blind = runtime.size() - 1;  // only the last rank sees no GPU
  try {
    runtime.selectCudaDevice(runtime.rank() == blind ? 0 : 1);
    FAIL() << "a rank without a GPU must stop every rank";
  } catch (const Error& error) {  // agreed errors arrive as mb::Error with the category's code
    EXPECT_EQ(error.code(), ExitCode::kUsage);
    EXPECT_TRUE(error.agreed());
    EXPECT_NE(std::string(error.what()).find("rank " + std::to_string(blind)), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("sees no CUDA device"), std::string::npos);
  }
}

TEST(DistRuntime, CpuThreadsPerRank) {
  auto& runtime = test::runtime();
  EXPECT_EQ(runtime.cpuThreadsPerRank(3), 3);
  int automatic = runtime.cpuThreadsPerRank(0);
  EXPECT_GE(automatic, 1);
  EXPECT_LE(automatic, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

TEST(DistRuntime, AutoBackendOnCpu) {
  auto& runtime = test::runtime();
  auto data = runtime.makeDataCommunicator(BackendKind::kAuto, "cpu", 0);
  EXPECT_EQ(data->size(), runtime.size());
  EXPECT_EQ(data->rank(), runtime.rank());
  EXPECT_EQ(data->backendName(), runtime.size() == 1 ? "single" : "mpi");
  if (runtime.size() > 1 && runtime.mpiThreadMultiple()) {
    EXPECT_NE(data.get(), &runtime.control()) << "gradients get their own communicator";
  }
  if (runtime.size() > 1) {
    EXPECT_THROW(runtime.makeDataCommunicator(BackendKind::kSingle, "cpu", 0), ConfigError);
  }
}

// What the multi-rank tests use under MEGABATCH_TEST_DEVICE=cuda (every rank on one GPU, where
// NCCL refuses two ranks): dist.backend = mpi carries CUDA tensors over MPI. Choosing it touches
// no GPU, so this runs on the CPU too.
TEST(DistRuntime, MpiBackendForCudaTensors) {
  auto& runtime = test::runtime();
  auto data = runtime.makeDataCommunicator(BackendKind::kMpi, "cuda", 0);
  EXPECT_EQ(data->size(), runtime.size());
  EXPECT_EQ(data->backendName(), runtime.size() == 1 ? "single" : "mpi");
}

}  // namespace
}  // namespace mb
