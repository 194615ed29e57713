// Linked into every GoogleTest binary of the suite: with MEGABATCH_TEST_DEVICE=cuda and no usable
// CUDA device, the binary ends before its first test with exit code 1 and the reason, instead of
// letting host-only tests pass and device tests fail one by one (Note [Test device] in Device.h).
// (A failure in a global SetUp would do too, but GoogleTest then lists every test as skipped and
// ends with "0 FAILED TESTS", which reads like a pass.)
#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/Device.h"

namespace mb::test {
namespace {

class DeviceCheck : public ::testing::Environment {
 public:
  void SetUp() override {
    std::string problem = deviceProblem();
    if (!problem.empty()) {
      std::fprintf(stderr, "[test device] FAILED: %s\n", problem.c_str());
      std::fflush(nullptr);
      std::exit(1);
    }
    if (requestedDevice() == "cuda")
      std::printf("[test device] %s (MEGABATCH_TEST_DEVICE=cuda)\n", device().str().c_str());
  }
};

// Registered at static initialisation, so gtest_main's main() needs no change.
[[maybe_unused]] ::testing::Environment* const kDeviceCheck =
    ::testing::AddGlobalTestEnvironment(new DeviceCheck);

}  // namespace
}  // namespace mb::test
