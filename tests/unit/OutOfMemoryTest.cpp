// Note [Out of memory is an expected error]: which failures count as running out of memory,
// which phase an exception names, and what the message says. The failures are built as the
// allocators throw them (texts from LibTorch 1.13 and 2.x); nothing here allocates for real, so
// the test also runs under AddressSanitizer, which would abort on a refused allocation.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include <c10/util/Exception.h>

#include "common/CpuAllocationScope.h"
#include "common/OutOfMemory.h"

namespace mb {
namespace {

c10::SourceLocation oomSourceLocation() {
  return {__func__, __FILE__, static_cast<std::uint32_t>(__LINE__)};
}

TEST(OutOfMemory, RecognisesEveryAllocatorsFailureAndNothingElse) {
  const c10::Error cpu(oomSourceLocation(),
                       "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't "
                       "allocate memory: you tried to allocate 6400000000 bytes. Error code 12 "
                       "(Cannot allocate memory)");
  auto found = asOutOfMemory(cpu);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->device, "CPU");
  EXPECT_EQ(found->requestedBytes, 6400000000);

  const c10::OutOfMemoryError gpu(oomSourceLocation(),
                                  "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 "
                                  "GiB total capacity; 77.01 GiB already allocated)");
  found = asOutOfMemory(gpu);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->device, "GPU");
  EXPECT_EQ(found->requestedBytes, std::int64_t{2} << 30);

  found = asOutOfMemory(std::bad_alloc());
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->requestedBytes, -1);
  found = asOutOfMemory(AllocationCapExceeded(4096, 100, 1000));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->requestedBytes, 4096);

  EXPECT_FALSE(
      asOutOfMemory(c10::Error(oomSourceLocation(), "shape '[2, 3]' is invalid")).has_value());
  EXPECT_FALSE(asOutOfMemory(std::runtime_error("can't allocate memory")).has_value());
}

TEST(OutOfMemory, AnExceptionNamesTheInnermostPhaseItLeftOnce) {
  try {
    MemoryPhase outer("training step 7");
    MemoryPhase inner("evaluating the val split");
    throw std::bad_alloc();
  } catch (const std::bad_alloc&) {
  }
  EXPECT_EQ(takeFailedPhase(), "evaluating the val split");
  EXPECT_EQ(takeFailedPhase(), "");  // taken once

  try {
    MemoryPhase outer("training step 8");
    throw std::bad_alloc();
  } catch (const std::bad_alloc&) {
  }
  { MemoryPhase next("training step 9"); }  // the failure above was handled before it started
  EXPECT_EQ(takeFailedPhase(), "");
}

TEST(OutOfMemory, TheMessageNamesRankPhaseBytesPlanAndRemediesWithoutAStackTrace) {
  setMemoryPlanSummary("12.0 MB needed of a 10.0 MB budget");
  const Error error = outOfMemoryError({"CPU", 6400000000}, 1, "training step 3");
  setMemoryPlanSummary("");
  EXPECT_EQ(error.code(), ExitCode::kFailure);
  const std::string text = error.message() + "\n" + error.hint();
  for (const char* part : {"rank 1 ran out of CPU memory while training step 3", "5.96 GiB",
                           "memory plan: 12.0 MB needed", "train.micro_batch", "train.global_batch",
                           "train.precision", "data.residency"})
    EXPECT_NE(text.find(part), std::string::npos) << part << " not in: " << text;
  EXPECT_LT(text.find("train.micro_batch"), text.find("train.precision"));  // the seed's order
  EXPECT_EQ(text.find("frame #"), std::string::npos);

  const Error build = outOfMemoryError({"GPU", -1}, 0, "building the model");
  EXPECT_NE(build.hint().find("model.hidden"), std::string::npos) << build.hint();
  const Error data = outOfMemoryError({"CPU", 1024}, 0, "loading the data");
  EXPECT_NE(data.hint().find("data.residency: stream"), std::string::npos) << data.hint();
}

TEST(OutOfMemory, ExplainingTakesThePhaseAndLeavesOtherErrorsAlone) {
  std::optional<Error> explained;
  try {
    MemoryPhase phase("assembling a checkpoint");
    throw std::bad_alloc();
  } catch (const std::exception& e) {
    explained = explainOutOfMemory(e);
  }
  ASSERT_TRUE(explained.has_value());
  EXPECT_NE(explained->message().find("while assembling a checkpoint"), std::string::npos)
      << explained->message();
  EXPECT_FALSE(explainOutOfMemory(std::runtime_error("disk full")).has_value());
}

}  // namespace
}  // namespace mb
