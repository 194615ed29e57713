// Note [CPU precision]: which CPUs have bf16/fp16 units, what the probe measures, and the
// warning train writes. The end-to-end warning (MEGABATCH_FAULT_CPU_FLAGS) is in
// tests/train/test_precision_fit.py.
#include <string>

#include <gtest/gtest.h>

#include "train/precision/CpuPrecision.h"

namespace mb::train {
namespace {

TEST(CpuPrecision, UnitsComeFromTheFlags) {
  std::string found;
  EXPECT_TRUE(cpuHasUnitsFor(DType::kBf16, "fpu avx2 avx512f avx512_bf16 avx512_vnni", &found));
  EXPECT_EQ(found, "avx512_bf16");
  EXPECT_TRUE(cpuHasUnitsFor(DType::kBf16, "avx2 amx_tile amx_bf16 amx_int8", &found));
  EXPECT_EQ(found, "amx_bf16");
  EXPECT_FALSE(cpuHasUnitsFor(DType::kBf16, "fpu avx2 fma avx512f avx512bw", &found));
  EXPECT_EQ(found, "no avx512_bf16 or amx_bf16 among its flags");
  // Whole words only: avx512_bf16 is no fp16 unit, and avx512_fp16x is no flag at all.
  EXPECT_FALSE(cpuHasUnitsFor(DType::kFp16, "avx512_bf16 avx512_fp16x", &found));
  EXPECT_TRUE(cpuHasUnitsFor(DType::kFp16, "avx512_fp16", &found));
}

TEST(CpuPrecision, WithoutUnitsTrainWarnsNamingFp32AndAuto) {
  CpuPrecisionCost cost;
  cost.hasUnits = cpuHasUnitsFor(DType::kBf16, "avx2 fma", &cost.flags);
  cost.fp32Ms = 0.1;
  cost.reducedMs = 2.9;
  const std::string warning = cpuPrecisionWarning(DType::kBf16, cost);
  EXPECT_NE(
      warning.find("train.precision = bf16: matrix products run about 29.0x slower than in fp32"),
      std::string::npos)
      << warning;
  EXPECT_NE(warning.find("no bf16 units"), std::string::npos) << warning;
  EXPECT_NE(warning.find("train.precision=fp32"), std::string::npos) << warning;
  EXPECT_NE(warning.find("train.precision=auto"), std::string::npos) << warning;
  // No units is reason enough, whatever the probe says (a CPU that emulates is never fast).
  cost.reducedMs = 0.1;
  EXPECT_NE(cpuPrecisionWarning(DType::kBf16, cost), "");
}

TEST(CpuPrecision, WithUnitsOnlyAMeasuredSlowdownWarns) {
  CpuPrecisionCost cost;
  cost.hasUnits = true;
  cost.flags = "avx512_bf16";
  cost.fp32Ms = 1.0;
  cost.reducedMs = 0.6;
  EXPECT_EQ(cpuPrecisionWarning(DType::kBf16, cost), "");
  cost.reducedMs = 1.0 * kSlowerRatio + 0.1;
  const std::string warning = cpuPrecisionWarning(DType::kBf16, cost);
  EXPECT_NE(warning.find("although it has bf16 units (avx512_bf16)"), std::string::npos) << warning;
}

TEST(CpuPrecision, TheProbeTimesBothPrecisions) {
  const CpuPrecisionCost cost = measureCpuPrecision(DType::kBf16, 32);
  EXPECT_GT(cost.fp32Ms, 0);
  EXPECT_GT(cost.reducedMs, 0);
  EXPECT_GT(cost.slowdown(), 0);
  EXPECT_FALSE(cost.flags.empty());
}

}  // namespace
}  // namespace mb::train
