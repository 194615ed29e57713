// The device-resident data path: a rank's rows resident in GPU memory and batches (series windows,
// sample rows, token windows) gathered there equal, byte for byte, the same batches gathered on
// the host from host-resident rows, for fp32 and bf16 residency, every layout, train and eval
// batches, and stream residency feeding the GPU.
#include <cstring>

#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "data/ShardedData.h"
#include "dist/SingleCommunicator.h"
#include "tests/data/DataFiles.h"
#include "tests/gpu/GpuTest.h"

namespace mb {
namespace {

using data::Split;

std::unique_ptr<data::ShardedData> load(Config config, Residency residency, c10::Device device) {
  config.data.residency = residency;
  dist::SingleCommunicator comm;
  return data::ShardedData::load(config, comm, device);
}

// Same dtype, shape and bytes (a CUDA tensor is copied to the host first).
void expectSameBytes(const at::Tensor& device, const at::Tensor& host, const std::string& what) {
  ASSERT_TRUE(device.is_cuda()) << what;
  at::Tensor a = device.cpu().contiguous();
  at::Tensor b = host.contiguous();
  ASSERT_EQ(a.scalar_type(), b.scalar_type()) << what;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()), 0) << what;
}

void expectSameBatch(const data::Batch& device, const data::Batch& host, const std::string& what) {
  ASSERT_EQ(device.inputs.size(), host.inputs.size()) << what;
  for (std::size_t i = 0; i < host.inputs.size(); ++i)
    expectSameBytes(device.inputs[i], host.inputs[i], what + " input " + std::to_string(i));
  expectSameBytes(device.targets, host.targets, what + " targets");
  expectSameBytes(device.sampleIndex, host.sampleIndex, what + " sample index");
}

// `config` loaded resident on the GPU (gathered there) against resident on the host and trained on
// the CPU (gathered on the host): every train batch of epoch 1 and slices of val and test.
void compareResidencies(const Config& config, Residency onGpu, at::ScalarType inputType) {
  auto gpu = load(config, onGpu, test::gpu());
  auto host = load(config, Residency::kHost, c10::Device(c10::kCPU));
  EXPECT_EQ(gpu->loadStats().residency, onGpu);
  if (onGpu == Residency::kDevice) {
    EXPECT_EQ(gpu->loadStats().bytesMapped, 0) << "device residency reads the rows";
  }
  ASSERT_EQ(gpu->batchesPerEpoch(), host->batchesPerEpoch());
  gpu->beginEpoch(1);
  host->beginEpoch(1);
  for (std::int64_t b = 0; b < host->batchesPerEpoch(); ++b) {
    std::int64_t n = host->localCount(b);
    ASSERT_EQ(gpu->localCount(b), n);
    expectSameBatch(gpu->trainBatch(b, 0, n, inputType), host->trainBatch(b, 0, n, inputType),
                    "train batch " + std::to_string(b));
    // A micro-batch slice of the same batch.
    expectSameBatch(gpu->trainBatch(b, n / 3, n, inputType),
                    host->trainBatch(b, n / 3, n, inputType),
                    "slice of batch " + std::to_string(b));
  }
  for (Split split : {Split::kVal, Split::kTest}) {
    std::int64_t n = host->evalCount(split);
    ASSERT_EQ(gpu->evalCount(split), n);
    expectSameBatch(gpu->evalBatch(split, 0, n, inputType), host->evalBatch(split, 0, n, inputType),
                    "eval split");
  }
}

class GpuDeviceData : public ::testing::Test {
 protected:
  test::TempDir dir_;
};

TEST_F(GpuDeviceData, SeriesWindowsGatheredOnTheGpuEqualTheHostGather) {
  std::string path = dir_.file("s.h5");
  test::writeSeriesFile(path, {});
  Config config = test::seriesConfig(path, {{"m1", 30}, {"m5", 8}});
  compareResidencies(config, Residency::kDevice, at::kFloat);
  compareResidencies(config, Residency::kDevice, at::kBFloat16);  // fp32 rows, bf16 inputs
  config.data.residentDtype = DType::kBf16;
  compareResidencies(config, Residency::kDevice, at::kBFloat16);
  compareResidencies(config, Residency::kDevice, at::kFloat);
}

TEST_F(GpuDeviceData, StreamedChunksFeedTheGpuWithTheSameBatches) {
  std::string path = dir_.file("s.h5");
  test::writeSeriesFile(path, {});
  Config config = test::seriesConfig(path, {{"m1", 12}, {"m5", 4}});
  config.data.streamChunkItems = 37;
  // The stream's chunk-major order differs from the resident order: compare stream with stream.
  auto gpu = load(config, Residency::kStream, test::gpu());
  auto host = load(config, Residency::kStream, c10::Device(c10::kCPU));
  gpu->beginEpoch(0);
  host->beginEpoch(0);
  for (std::int64_t b = 0; b < host->batchesPerEpoch(); ++b) {
    std::int64_t n = host->localCount(b);
    expectSameBatch(gpu->trainBatch(b, 0, n, at::kFloat), host->trainBatch(b, 0, n, at::kFloat),
                    "streamed batch " + std::to_string(b));
  }
}

TEST_F(GpuDeviceData, SampleRowsAndTokenWindowsGatheredOnTheGpuEqualTheHostGather) {
  std::string samples = dir_.file("x.h5");
  test::writeSamplesFile(samples, 700, 6, 3, at::arange(700, at::kFloat));
  Config rows;
  rows.data.path = samples;
  rows.data.canonicalShards = 8;
  rows.train.globalBatch = 32;
  compareResidencies(rows, Residency::kDevice, at::kFloat);

  std::string tokens = dir_.file("t.h5");
  test::writeTokensFile(tokens, 5001, 97, at::kShort);
  Config windows;
  windows.data.path = tokens;
  windows.data.layout = "tokens";
  windows.data.context = 10;
  windows.data.canonicalShards = 4;
  windows.train.globalBatch = 16;
  windows.model.kind = "gpt";
  compareResidencies(windows, Residency::kDevice, at::kFloat);
}

}  // namespace
}  // namespace mb
