#pragma once
// Shared by the gpu-labelled tests (CUDA builds only, tests/gpu/Tests.cmake): the GPU they run on,
// whatever MEGABATCH_TEST_DEVICE says, and the process runtime (a world of one: no launcher).
#include <c10/core/Device.h>

#include "dist/Runtime.h"

namespace mb::test {

inline c10::Device gpu() {
  return c10::Device(c10::kCUDA, 0);
}

// Created by GpuMain.cpp before the first test.
dist::Runtime& gpuRuntime();

}  // namespace mb::test
