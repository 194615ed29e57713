// The HDF5 helpers against objects that h5py and other tools write but megabatch does not:
// attributes holding arrays or nothing, where one value is expected (found by the data schema
// fuzzer: an int64[2] vocab_size overflowed readIntAttribute's one-value buffer).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "tests/support/TempDir.h"

namespace mb {
namespace {

// An attribute `name` on the root group of a new file, of `type` and `count` elements
// (count 0: a null dataspace; -1: a scalar), holding `values`.
h5::Handle fileWithAttribute(const std::string& path, const std::string& name, hid_t type,
                             int count, const void* values) {
  h5::Handle file = h5::createFile(path, false, ExitCode::kFailure);
  hsize_t dims = static_cast<hsize_t>(count);
  h5::Handle space(count < 0    ? H5Screate(H5S_SCALAR)
                   : count == 0 ? H5Screate(H5S_NULL)
                                : H5Screate_simple(1, &dims, nullptr),
                   H5Sclose);
  h5::Handle attribute(
      H5Acreate2(file.get(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  EXPECT_TRUE(attribute.valid());
  if (count != 0) {
    EXPECT_GE(H5Awrite(attribute.get(), type, values), 0);
  }
  return file;
}

// Runs `read` and expects a bad-data error (exit 3) whose message contains `expected`.
template <class Read>
void expectDataError(Read read, const std::string& expected) {
  try {
    read();
    ADD_FAILURE() << "no error; expected one containing: " << expected;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kData);
    EXPECT_NE(e.message().find(expected), std::string::npos) << e.message();
  }
}

class Hdf5Attribute : public ::testing::Test {
 protected:
  test::TempDir dir_;
};

TEST_F(Hdf5Attribute, ScalarIntReads) {
  std::int64_t value = 256;
  auto file = fileWithAttribute(dir_.file("a.h5"), "vocab_size", H5T_NATIVE_INT64, -1, &value);
  EXPECT_EQ(h5::readIntAttribute(file.get(), "vocab_size", ExitCode::kData), 256);
}

TEST_F(Hdf5Attribute, IntArrayIsRefusedNotOverflowed) {
  std::vector<std::int64_t> values{256, 512, 1024, 2048};
  auto file =
      fileWithAttribute(dir_.file("a.h5"), "vocab_size", H5T_NATIVE_INT64, 4, values.data());
  expectDataError([&] { h5::readIntAttribute(file.get(), "vocab_size", ExitCode::kData); },
                  "attribute 'vocab_size' holds 4 values, expected a single value");
}

TEST_F(Hdf5Attribute, DoubleArrayIsRefused) {
  std::vector<double> values{0.5, 1.5};
  auto file = fileWithAttribute(dir_.file("a.h5"), "lr", H5T_NATIVE_DOUBLE, 2, values.data());
  expectDataError([&] { h5::readDoubleAttribute(file.get(), "lr", ExitCode::kData); },
                  "holds 2 values");
}

TEST_F(Hdf5Attribute, NullDataspaceIsRefused) {
  auto file = fileWithAttribute(dir_.file("a.h5"), "vocab_size", H5T_NATIVE_INT64, 0, nullptr);
  expectDataError([&] { h5::readIntAttribute(file.get(), "vocab_size", ExitCode::kData); },
                  "holds 0 values");
}

TEST_F(Hdf5Attribute, StringArraysAreRefused) {
  h5::Handle fixed(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(fixed.get(), 4);
  auto file = fileWithAttribute(dir_.file("a.h5"), "names", fixed.get(), 3, "abcdefghijkl");
  expectDataError([&] { h5::readStringAttribute(file.get(), "names", ExitCode::kData); },
                  "holds 3 values");

  h5::Handle variable(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(variable.get(), H5T_VARIABLE);
  const char* texts[] = {"a", "b"};
  auto other = fileWithAttribute(dir_.file("b.h5"), "names", variable.get(), 2, texts);
  expectDataError([&] { h5::readStringAttribute(other.get(), "names", ExitCode::kData); },
                  "holds 2 values");
}

}  // namespace
}  // namespace mb
