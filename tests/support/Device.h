#pragma once
// The device of the device-switched tests: MEGABATCH_TEST_DEVICE=cpu (the default) or cuda.
//
// Note [Test device]
// One switch puts the suite on the GPU: `MEGABATCH_TEST_DEVICE=cuda ctest --output-on-failure`
// (tests/CMakeLists.txt). Tests that build tensors, models, resident data, gathers, optimizers,
// reducers or checkpoints make them on test::device(); host-only tests (config parsing, HDF5
// schema, global order, the CLI) ignore the switch. The Python drivers read the same variable
// (tests/python/mbtest.py adds train.device=... to every `train` and `data check` they run).
//  - cuda without a usable CUDA device is a failure, never a silent CPU run: device() throws,
//    and every GoogleTest binary fails before its first test (tests/support/DeviceCheck.cpp).
//  - Under cuda the tests switch TF32 off (LibTorch allows it in cuDNN by default), so fp32
//    means fp32 and the CPU tolerances mostly hold. What remains is the order of summation:
//    cuBLAS and cuDNN pick kernels by shape, so the same math on another batch split (W ranks
//    against one process, micro-steps against one step) rounds differently. Such comparisons
//    use test::tolerance(cpu, cuda), with cuda at most 10x the CPU value: still orders of
//    magnitude below what a real bug gives (a gradient averaged instead of summed is off by
//    1 - 1/W, a wrong window by O(1)).
//  - Every rank of a multi-rank test uses cuda:0; gradients then go over the MPI backend
//    (test::dataCommunicator() in tests/mpi/MpiTestMain.h), since NCCL refuses two ranks on
//    one GPU.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <c10/core/Device.h>
#include <torch/cuda.h>

#include "common/TorchCompat.h"

namespace mb::test {

inline constexpr char kTestDeviceVariable[] = "MEGABATCH_TEST_DEVICE";

// "cpu" or "cuda" as asked for (unset or empty: cpu). Anything else throws.
inline std::string requestedDevice() {
  const char* value = std::getenv(kTestDeviceVariable);
  std::string name = value && *value ? value : "cpu";
  if (name != "cpu" && name != "cuda")
    throw std::runtime_error(std::string(kTestDeviceVariable) + "=" + name +
                             ": expected cpu or cuda");
  return name;
}

// Why the requested device cannot be used, or "" when it can.
inline std::string deviceProblem() {
  std::string name;
  try {
    name = requestedDevice();
  } catch (const std::exception& e) {
    return e.what();
  }
  if (name == "cuda" && !(torch::cuda::is_available() && torch::cuda::device_count() > 0))
    return std::string(kTestDeviceVariable) +
           "=cuda, but no CUDA device is usable by this build (a CPU LibTorch, or no GPU "
           "visible): the tests do not fall back to the CPU. Build with scripts/build-gpu.sh on a "
           "GPU machine, or unset " +
           kTestDeviceVariable + " to test on the CPU.";
  return "";
}

// The device the switched tests build their tensors and models on. Throws (so the calling test
// fails) when cuda is asked for and cannot be used.
inline c10::Device device() {
  static const c10::Device chosen = [] {
    std::string problem = deviceProblem();
    if (!problem.empty()) throw std::runtime_error(problem);
    if (requestedDevice() == "cpu") return c10::Device(c10::kCPU);
    compat::setTf32(false);
    return c10::Device(c10::kCUDA, 0);
  }();
  return chosen;
}

inline bool onCuda() {
  return device().is_cuda();
}

// A comparison tolerance: `cpu`, or `cuda` for a comparison whose two sides sum in different
// orders on the GPU (Note [Test device]).
inline double tolerance(double cpu, double cuda) {
  return onCuda() ? cuda : cpu;
}

}  // namespace mb::test
