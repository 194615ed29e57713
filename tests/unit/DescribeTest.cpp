// `megabatch inspect` (describeDataFile) on files that h5py can write but no layout uses; both
// cases were found by the data schema fuzzer.
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "data/tools/Tools.h"
#include "tests/support/TempDir.h"

namespace mb {
namespace {

class Describe : public ::testing::Test {
 protected:
  test::TempDir dir_;
  std::string path_ = dir_.file("d.h5");
};

// A group hard-linked into itself (h5py: f['g/loop'] = f['g']) made the walk recurse forever.
TEST_F(Describe, GroupCycleIsListedOnce) {
  {
    h5::Handle file = h5::createFile(path_, false, ExitCode::kFailure);
    h5::Handle group = h5::createGroup(file.get(), "g", ExitCode::kFailure);
    h5::writeTensor(group.get(), "x", at::arange(4, at::kFloat), {}, ExitCode::kFailure);
    ASSERT_GE(H5Lcreate_hard(file.get(), "g", file.get(), "g/loop", H5P_DEFAULT, H5P_DEFAULT), 0);
    ASSERT_GE(H5Lcreate_hard(file.get(), "/", file.get(), "g/root", H5P_DEFAULT, H5P_DEFAULT), 0);
  }
  std::string text = data::describeDataFile(path_);
  EXPECT_NE(text.find("/g/x "), std::string::npos) << text;
  EXPECT_EQ(text.find("loop/"), std::string::npos) << text;
}

// A scalar /timestamps has one "row" by DatasetInfo::rows() but none to read: reading row 0
// wrote past an empty shape vector.
TEST_F(Describe, ScalarTimestampsAreABadDataErrorNotACrash) {
  {
    h5::Handle file = h5::createFile(path_, false, ExitCode::kFailure);
    h5::writeTensor(file.get(), "features", at::zeros({4, 2}), {}, ExitCode::kFailure);
    h5::writeTensor(file.get(), "timestamps", at::scalar_tensor(7, at::kLong), {},
                    ExitCode::kFailure);
  }
  try {
    data::describeDataFile(path_);
    ADD_FAILURE() << "expected an error for the scalar /timestamps";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kData);
    EXPECT_NE(e.message().find("has no rows"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace mb
