#pragma once
// Shared by the gpu-labelled tests (CUDA builds only, tests/gpu/Tests.cmake): the GPU they run on,
// whatever MEGABATCH_TEST_DEVICE says, and the process runtime (a world of one: no launcher).
#include <cstdint>

#include <c10/core/Device.h>

#include "data/Batch.h"
#include "data/DataInfo.h"
#include "dist/Runtime.h"
#include "tests/unit/ModelFixtures.h"

namespace mb::test {

inline c10::Device gpu() {
  return c10::Device(c10::kCUDA, 0);
}

// A random batch for `info` on the GPU (test::randomBatch follows MEGABATCH_TEST_DEVICE).
inline data::Batch gpuBatch(const data::DataInfo& info, std::int64_t rows) {
  data::Batch batch = randomBatch(info, rows);
  for (auto& input : batch.inputs)
    input = input.to(gpu());
  batch.targets = batch.targets.to(gpu());
  batch.sampleIndex = batch.sampleIndex.to(gpu());
  return batch;
}

// Created by GpuMain.cpp before the first test.
dist::Runtime& gpuRuntime();

}  // namespace mb::test
