// The data identity under mpirun -np 1, 2, 3 (Note [Data continuity], Note [Content hash]): the
// identity a load records equals identifyFile's, and each dataset's hash equals a serial
// reference (the whole dataset read on one rank and hashed unit by unit in one pass), whatever
// the residency (host, mapped, streamed), resident dtype, embargo and layout. The reference does
// not depend on the number of ranks, so neither does the identity.
#include <gtest/gtest.h>

#include <cstdio>

#include <ATen/Functions.h>

#include "data/ShardedData.h"
#include "data/pipeline/ContentHash.h"
#include "data/pipeline/DataIdentity.h"
#include "dist/Communicator.h"
#include "tests/data/DataFiles.h"
#include "tests/data/GraphFiles.h"
#include "tests/mpi/MpiTestMain.h"
#include "tests/support/Device.h"

namespace mb {
namespace {

// A directory every rank sees (rank 0 names it after its pid).
std::string identityDir() {
  auto& comm = test::runtime().control();
  at::Tensor pid = at::full({1}, static_cast<std::int64_t>(::getpid()), at::kLong);
  comm.broadcast(pid, 0);
  std::string dir = "/tmp/mb-mpi-identity-" + std::to_string(pid.item<std::int64_t>());
  if (comm.rank() == 0) std::filesystem::create_directories(dir);
  comm.barrier();
  return dir;
}

void removeIdentityDir(const std::string& dir) {
  auto& comm = test::runtime().control();
  comm.barrier();
  if (comm.rank() == 0) test::removeTree(dir);
}

// The reference: every unit of dataset `d` of the file, hashed in one pass on this rank. A bf16
// NaN as Note [Content hash] says (0x7fc0; a vectorised rounding gives 0xffff).
std::string serialHash(const std::string& path, const data::DatasetIdentity& d) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::Handle file = h5::openFile(path, false, ExitCode::kData);
  const at::ScalarType type = data::heldTypeNamed(d.heldAs).value();
  at::Tensor all =
      h5::readTensor(file.get(), d.path, ExitCode::kData, type == at::kBFloat16 ? at::kFloat : type)
          .to(type)
          .transpose(0, d.axis)
          .contiguous();
  if (type == at::kBFloat16) all.masked_fill_(at::isnan(all), NAN);
  const std::int64_t rows = all.size(0);
  const std::int64_t rowBytes = all.numel() / rows * static_cast<std::int64_t>(all.element_size());
  EXPECT_EQ(d.unitRows, std::max<std::int64_t>(1, 4096 / rowBytes)) << d.path;
  const auto* bytes = static_cast<const unsigned char*>(all.data_ptr());
  std::uint64_t sum = 0;
  for (std::int64_t k = 0; k * d.unitRows < rows; ++k) {
    const std::int64_t n = std::min(d.unitRows, rows - k * d.unitRows);
    sum += data::hashUnit(k, bytes + k * d.unitRows * rowBytes,
                          static_cast<std::size_t>(n * rowBytes));
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(sum));
  return text;
}

// The load's identity against identifyFile's and the reference; returns the load's.
data::DataIdentity expectConsistent(const Config& config, const std::string& what) {
  auto& comm = test::runtime().control();
  auto loaded = data::ShardedData::load(config, comm, test::device(), data::Identity::kRecord);
  const std::string yaml = loaded->info().identityYaml;
  loaded.reset();
  const data::DataIdentity file = data::identifyFile(config, comm);
  EXPECT_EQ(yaml, data::identityToYaml(file)) << what;
  auto identity = data::identityFromYaml(yaml);
  EXPECT_TRUE(identity.has_value()) << what;
  if (!identity) return {};
  EXPECT_EQ(identity->scheme, data::kIdentityScheme);
  for (const auto& d : identity->datasets)
    EXPECT_EQ(d.hash, serialHash(config.data.path, d)) << what << ": /" << d.path;
  return *identity;
}

const data::DatasetIdentity* datasetOf(const data::DataIdentity& identity,
                                       const std::string& path) {
  for (const auto& d : identity.datasets) {
    if (d.path == path) return &d;
  }
  return nullptr;
}

TEST(DataIdentity, SeriesIsTheSameHoweverItIsHeld) {
  auto& comm = test::runtime().control();
  std::string dir = identityDir();
  std::string path = dir + "/series.h5";
  test::SeriesSpec spec;
  spec.rows = 3000;
  spec.firstRow = 40;  // rows before the first sample's window: held by no store
  spec.write.chunkRows = 64;
  spec.write.gzipLevel = 1;
  if (comm.rank() == 0) test::writeSeriesFile(path, spec);
  comm.barrier();
  Config config = test::seriesConfig(path, {{"m1", 12}, {"m5", 4}});
  config.data.canonicalShards = 6;
  config.train.globalBatch = 12;
  const data::DataIdentity host = expectConsistent(config, "host");
  ASSERT_EQ(host.datasets.size(), 6u);  // values and ends of each stream, targets, timestamps
  EXPECT_EQ(datasetOf(host, "series/m1/values")->heldAs, "float32");
  EXPECT_EQ(datasetOf(host, "samples/end/m1")->heldAs, "int32");  // as the stores hold the ends
  EXPECT_EQ(datasetOf(host, "timestamps")->heldAs, "int64");      // no store reads them

  config.data.hostMmap = true;
  EXPECT_EQ(data::identityToYaml(expectConsistent(config, "mapped")), data::identityToYaml(host));
  config.data.hostMmap = false;
  config.data.residency = Residency::kStream;
  config.data.streamChunkItems = 100;
  EXPECT_EQ(data::identityToYaml(expectConsistent(config, "streamed")), data::identityToYaml(host));
  config.data.residency = Residency::kHost;
  config.data.split.embargo = 0;  // windows of neighbouring splits share rows
  EXPECT_EQ(expectConsistent(config, "embargo 0").datasets.size(), host.datasets.size());
  config.data.split.embargo = -1;
  config.data.residentDtype = DType::kBf16;
  const data::DataIdentity bf16 = expectConsistent(config, "bf16");
  EXPECT_EQ(datasetOf(bf16, "series/m1/values")->heldAs, "bfloat16");
  EXPECT_NE(datasetOf(bf16, "series/m1/values")->hash, datasetOf(host, "series/m1/values")->hash);
  EXPECT_EQ(datasetOf(bf16, "targets")->hash, datasetOf(host, "targets")->hash);
  removeIdentityDir(dir);
}

TEST(DataIdentity, TokensGraphsAndPanelsAreTheSameOnAnyRankCount) {
  auto& comm = test::runtime().control();
  std::string dir = identityDir();
  const std::string tokens = dir + "/tokens.h5", graphs = dir + "/graphs.h5",
                    panel = dir + "/panel.h5";
  const std::int64_t dates = 120, instruments = 6;
  if (comm.rank() == 0) {
    test::writeTokensFile(tokens, 20001, 97, at::kShort);
    test::GraphSpec graphSpec;
    test::writeGraphsFile(graphs, graphSpec);
    h5::Handle file = h5::createFile(panel, false, ExitCode::kFailure);
    at::Tensor present =
        at::arange(dates * instruments).view({dates, instruments}).remainder(7) != 3;
    at::Tensor values = at::randn({dates, instruments, 2}, at::kFloat);
    values.masked_fill_(present.logical_not().unsqueeze(2), NAN);  // absent: NaN
    h5::writeTensor(file.get(), "values", values, {}, ExitCode::kFailure);
    h5::writeTensor(file.get(), "mask", present.to(at::kByte), {}, ExitCode::kFailure);
    h5::writeTensor(file.get(), "target", at::randn({dates, instruments}), {}, ExitCode::kFailure);
    h5::writeTensor(file.get(), "sector", at::arange(instruments, at::kLong).remainder(2), {},
                    ExitCode::kFailure);
  }
  comm.barrier();
  Config config;
  config.data.path = tokens;
  config.data.layout = "tokens";
  config.data.context = 10;  // consecutive ranks share a token
  config.data.canonicalShards = 4;
  config.train.globalBatch = 8;
  config.model.kind = "gpt";
  expectConsistent(config, "tokens");
  config.data.residency = Residency::kStream;
  expectConsistent(config, "tokens, streamed");

  const data::DataIdentity graph = expectConsistent(test::graphsConfig(graphs), "graphs");
  const data::DatasetIdentity* edges = datasetOf(graph, "edge_index");  // read along its columns
  ASSERT_NE(edges, nullptr);
  EXPECT_EQ(edges->axis, 1);
  EXPECT_EQ(edges->sinceScheme, 2);

  config = Config();
  config.data.path = panel;
  config.data.layout = "panel";
  config.data.panel.window = 5;
  config.data.canonicalShards = 3;
  config.train.globalBatch = 3;
  config.data.residency = Residency::kHost;
  config.model.kind = "gat";
  config.model.graph.lookback = 10;  // a halo of 9 dates before each store's first
  config.model.graph.minPeriods = 4;
  config.model.graph.sectorEdges = true;  // every store reads all of /sector
  expectConsistent(config, "panel");
  config.data.residentDtype = DType::kBf16;  // NaNs where absent, rounded to bf16
  expectConsistent(config, "panel, bf16");
  removeIdentityDir(dir);
}

}  // namespace
}  // namespace mb
