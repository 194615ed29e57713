// Note [Rows kept between loads]: reads through a RowCache equal reads from the file, whatever
// the ranges before, and read from the file only the rows not held.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "data/pipeline/Reader.h"
#include "data/pipeline/RowCache.h"
#include "tests/support/TempDir.h"

namespace mb::data {
namespace {

TEST(RowCache, LacksTheRowsBeforeAndAfterWhatItHolds) {
  auto lacking = [](ItemRange need, ItemRange have) {
    auto [before, after] = rowsLacking(need, have);
    return std::vector<std::int64_t>{before.begin, before.end, after.begin, after.end};
  };
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(lacking({10, 20}, {0, 0}), (V{10, 20, 20, 20}));    // nothing held
  EXPECT_EQ(lacking({10, 20}, {12, 15}), (V{10, 12, 15, 20}));  // inside: both sides
  EXPECT_EQ(lacking({10, 20}, {5, 15}), (V{10, 10, 15, 20}));   // the range grew right
  EXPECT_EQ(lacking({10, 20}, {15, 30}), (V{10, 15, 20, 20}));  // moved left
  EXPECT_EQ(lacking({10, 20}, {0, 40}), (V{10, 10, 20, 20}));   // all held
  EXPECT_EQ(lacking({10, 20}, {20, 30}), (V{10, 20, 20, 20}));  // touching: disjoint
  EXPECT_EQ(lacking({10, 10}, {0, 40}), (V{10, 10, 10, 10}));   // nothing needed
}

TEST(RowCache, KeptReadsEqualFileReadsAndReadOnlyTheNewRows) {
  test::TempDir dir;
  const std::string path = dir.file("rows.h5");
  const at::Tensor values = at::arange(0, 300, at::kFloat).reshape({100, 3});
  {
    h5::Handle file = h5::createFile(path, false, ExitCode::kFailure);
    h5::writeTensor(file.get(), "values", values, {}, ExitCode::kFailure);
  }
  h5::Handle file = h5::openFile(path, false, ExitCode::kData);
  const RowCache::Scope scope(path);
  RowCache* cache = RowCache::of(path);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(RowCache::of(dir.file("other.h5")), nullptr);
  // One rank's ranges as a walk's folds move them: growing, moving on, shrinking, elsewhere.
  const std::vector<ItemRange> loads{{0, 40}, {10, 55}, {30, 60}, {35, 50}, {70, 90}, {0, 100}};
  const std::vector<std::int64_t> fromFile{40, 15, 5, 0, 20, 80};
  for (std::size_t i = 0; i < loads.size(); ++i) {
    RowReader reader(file.get(), H5P_DEFAULT, false);
    at::Tensor out = at::empty({loads[i].size(), 3}, at::kFloat);
    reader.read("values", {loads[i]}, 0, out, 0, cache, "key");
    reader.throwIfFailed();
    EXPECT_TRUE(at::equal(out, values.narrow(0, loads[i].begin, loads[i].size()))) << i;
    EXPECT_EQ(reader.bytesRead(), fromFile[i] * 3 * 4) << i;
    EXPECT_EQ(reader.bytesKept(), (loads[i].size() - fromFile[i]) * 3 * 4) << i;
  }
  EXPECT_EQ(cache->bytesHeld(), 100 * 3 * 4);  // the last load's rows only
}

}  // namespace
}  // namespace mb::data
