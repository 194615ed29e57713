// main() of megabatch_gpu_tests: fails at once, with the reason, where no CUDA device is usable
// (never skips), switches TF32 off so fp32 comparisons mean fp32, and holds the runtime.
#include <cstdio>
#include <memory>

#include <gtest/gtest.h>

#include <torch/cuda.h>

#include "common/TorchCompat.h"
#include "tests/gpu/GpuTest.h"

namespace mb::test {
namespace {
std::unique_ptr<dist::Runtime> gRuntime;
}  // namespace

dist::Runtime& gpuRuntime() {
  return *gRuntime;
}

}  // namespace mb::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!torch::cuda::is_available() || torch::cuda::device_count() < 1) {
    std::fprintf(stderr,
                 "megabatch_gpu_tests: no usable CUDA device (is a GPU visible? "
                 "CUDA_VISIBLE_DEVICES?): the gpu tests need one and do not skip\n");
    return 1;
  }
  mb::compat::setTf32(false);
  mb::test::gRuntime = std::make_unique<mb::dist::Runtime>(&argc, &argv);
  int status = RUN_ALL_TESTS();
  mb::test::gRuntime.reset();
  return status;
}
