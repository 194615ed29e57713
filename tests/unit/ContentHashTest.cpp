// Note [Content hash] and what a resume makes of it (Note [Data continuity]), in one process:
// every byte of a unit counts, pieces of a dataset add up to its hash, and compareData tells the
// same file, rows appended, one changed value (old rows of a grown file included) and another
// resident dtype apart, against identifyFile of files written here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <ATen/Functions.h>

#include "data/pipeline/ContentHash.h"
#include "data/pipeline/DataIdentity.h"
#include "dist/SingleCommunicator.h"
#include "tests/data/DataFiles.h"

namespace mb {
namespace {

TEST(ContentHash, EveryByteOfAUnitCounts) {
  std::vector<unsigned char> bytes(100);
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<unsigned char>(i * 37 + 11);
  const std::uint64_t hash = data::hashUnit(5, bytes.data(), bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit : {0, 7}) {
      bytes[i] ^= static_cast<unsigned char>(1 << bit);
      EXPECT_NE(data::hashUnit(5, bytes.data(), bytes.size()), hash) << "byte " << i;
      bytes[i] ^= static_cast<unsigned char>(1 << bit);
    }
  }
  EXPECT_NE(data::hashUnit(6, bytes.data(), bytes.size()), hash);  // the unit's place counts
  bytes.push_back(0);                                              // and its length, zeros included
  EXPECT_NE(data::hashUnit(5, bytes.data(), bytes.size()), hash);
}

TEST(ContentHash, PiecesAddUpToTheWhole) {
  data::HashedDataset d;
  d.path = "x";
  d.dims = {1000, 3};
  d.type = at::kFloat;
  ASSERT_EQ(d.unitRows(), 4096 / 12);
  ASSERT_EQ(d.units(), 3);
  at::Tensor all = at::randn({1000, 3});
  const std::uint64_t whole = data::hashUnits(d, 0, all);
  const std::int64_t cut = 2 * d.unitRows();
  EXPECT_EQ(data::hashUnits(d, 0, all.narrow(0, 0, cut)) +
                data::hashUnits(d, 2, all.narrow(0, cut, 1000 - cut)),
            whole);
  EXPECT_EQ(data::hashUnits(d, 0, all.t().contiguous().t()), whole);  // any memory layout
  all[999][2] = all[999][2].item<float>() + 1;
  EXPECT_NE(data::hashUnits(d, 0, all), whole);
  EXPECT_EQ(d.unitsWithin({1, 999}).size(), 1);  // only unit 1 lies wholly inside
  EXPECT_EQ(d.unitsWithin({341, 1000}).end, 3);  // the short last unit ends the dataset
  EXPECT_EQ(d.unitsWithin({342, 680}).size(), 0);
}

TEST(ContentHash, BfloatNansCountAsOneValue) {
  data::HashedDataset d;
  d.path = "x";
  d.dims = {4};
  d.type = at::kBFloat16;
  at::Tensor a = at::zeros({4}, at::kBFloat16), b = at::zeros({4}, at::kBFloat16);
  const std::uint16_t quiet = 0x7fc0, other = 0x7fff;  // two NaNs (CPU and GPU roundings)
  std::memcpy(static_cast<char*>(a.data_ptr()) + 2, &quiet, 2);
  std::memcpy(static_cast<char*>(b.data_ptr()) + 2, &other, 2);
  ASSERT_TRUE(std::isnan(b[1].item<float>()));
  EXPECT_EQ(data::hashUnits(d, 0, a), data::hashUnits(d, 0, b));
}

class ContentHashCompare : public ::testing::Test {
 protected:
  std::string write(const std::string& name, std::int64_t rows) {
    std::string path = dir_.file(name);
    test::SeriesSpec spec;
    spec.rows = rows;
    test::writeSeriesFile(path, spec);
    return path;
  }

  // Adds `delta` to values[row, 0] of stream m1, as a user restating one value would.
  static void restate(const std::string& path, std::int64_t row, float delta) {
    at::Tensor values;
    {
      h5::Handle file = h5::openFile(path, false, ExitCode::kData);
      values = h5::readTensor(file.get(), "series/m1/values", ExitCode::kData, at::kFloat);
    }
    values[row][0] += delta;
    h5::Handle file = h5::openFile(path, true, ExitCode::kData);
    h5::Handle group = h5::openGroup(file.get(), "series/m1", ExitCode::kData);
    ASSERT_GE(H5Ldelete(group.get(), "values", H5P_DEFAULT), 0);
    h5::writeTensor(group.get(), "values", values, {}, ExitCode::kFailure);
  }

  data::DataIdentity identify(const std::string& path, DType resident = DType::kFp32) {
    Config config = test::seriesConfig(path, {{"m1", 12}, {"m5", 4}});
    config.data.residentDtype = resident;
    return data::identifyFile(config, comm_);
  }

  data::DataChange compare(const data::DataIdentity& before, const std::string& path,
                           DType resident = DType::kFp32) {
    return data::compareData(before, identify(path, resident), path);
  }

  test::TempDir dir_;
  dist::SingleCommunicator comm_;
};

TEST_F(ContentHashCompare, SameAppendedAndChanged) {
  // 2000 rows: not whole units (341 rows of m1, 1024 targets), so a grown file's old end cuts
  // a unit and the appended check hashes that unit both ways.
  const std::string small = write("small.h5", 2000);
  const data::DataIdentity before = identify(small);
  auto yaml = data::identityFromYaml(data::identityToYaml(before));
  ASSERT_TRUE(yaml.has_value());
  EXPECT_EQ(data::identityToYaml(*yaml), data::identityToYaml(before));
  EXPECT_EQ(compare(before, small).kind, data::DataChange::Kind::kSame);

  const std::string grown = write("grown.h5", 2600);
  data::DataChange change = compare(before, grown);
  EXPECT_EQ(change.kind, data::DataChange::Kind::kAppended);
  EXPECT_EQ(change.rowsAdded, 600);
  EXPECT_TRUE(change.differences.empty());

  restate(small, 1000, 1.0f);  // one value of a training row
  change = compare(before, small);
  ASSERT_EQ(change.kind, data::DataChange::Kind::kChanged);
  EXPECT_EQ(change.differences, std::vector<std::string>{"/series/m1/values holds other values"});
  restate(small, 1000, -1.0f);  // put back: the same again
  EXPECT_EQ(compare(before, small).kind, data::DataChange::Kind::kSame);

  restate(grown, 1999, 0.5f);  // the last old row, in the unit the old end cuts
  change = compare(before, grown);
  ASSERT_EQ(change.kind, data::DataChange::Kind::kChanged);
  EXPECT_EQ(change.differences,
            std::vector<std::string>{"/series/m1/values grew from 2000 to 2600 rows, and its "
                                     "first 2000 rows hold other values"});
  restate(grown, 1999, -0.5f);
  restate(grown, 2000, 0.5f);  // a new row: still appended
  EXPECT_EQ(compare(before, grown).kind, data::DataChange::Kind::kAppended);
}

TEST_F(ContentHashCompare, AnotherResidentDtypeIsNamed) {
  const std::string small = write("small.h5", 2000);
  const data::DataChange change = compare(identify(small), small, DType::kBf16);
  ASSERT_EQ(change.kind, data::DataChange::Kind::kChanged);
  ASSERT_EQ(change.differences.size(), 2u);  // the values of both streams
  EXPECT_EQ(change.differences[0].rfind("/series/m1/values was held as float32, now as bfloat16 "
                                        "(data.resident_dtype changed",
                                        0),
            0u)
      << change.differences[0];
}

}  // namespace
}  // namespace mb
