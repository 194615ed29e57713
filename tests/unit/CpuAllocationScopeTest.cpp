// Note [Counting CPU allocations]: what a scope counts, what it refuses, and that storage made
// in a scope outlives it.
#include <gtest/gtest.h>

#include <ATen/Functions.h>
#include <c10/core/CPUAllocator.h>

#include "common/CpuAllocationScope.h"

namespace mb {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

TEST(CpuAllocationScope, CountsLiveAndPeakBytesOfItsOwnTensors) {
  at::Tensor before = at::ones({kMiB / 4}, at::kFloat);  // 1 MiB, outside any scope
  CpuAllocationScope scope;
  {
    at::Tensor a = at::zeros({kMiB / 2}, at::kFloat);  // 2 MiB
    at::Tensor b = at::zeros({kMiB}, at::kFloat);      // 4 MiB
    EXPECT_GE(scope.liveBytes(), 6 * kMiB);
    EXPECT_LT(scope.liveBytes(), 7 * kMiB);
  }
  before = at::Tensor();  // freed in the scope, allocated before it: not counted
  EXPECT_LT(scope.liveBytes(), kMiB / 2);
  EXPECT_GE(scope.peakBytes(), 6 * kMiB);
  EXPECT_LT(scope.peakBytes(), 7 * kMiB);
}

TEST(CpuAllocationScope, RefusesAnAllocationPastItsCapAndKeepsCounting) {
  CpuAllocationScope scope(8 * kMiB);
  at::Tensor fits = at::zeros({kMiB}, at::kFloat);  // 4 MiB
  try {
    at::Tensor tooBig = at::zeros({kMiB * 2}, at::kFloat);  // 8 more MiB
    FAIL() << "an allocation past the cap went through";
  } catch (const AllocationCapExceeded& e) {
    EXPECT_EQ(e.requested, 8 * kMiB);
    EXPECT_EQ(e.cap, 8 * kMiB);
    EXPECT_GE(e.live, 4 * kMiB);
  }
  EXPECT_LT(scope.liveBytes(), 5 * kMiB);  // the refused bytes were not kept
  EXPECT_NO_THROW(at::zeros({kMiB / 2}, at::kFloat));
}

TEST(CpuAllocationScope, StorageFromAScopeWorksAfterItAndOnlyOneScopeAtATime) {
  at::Tensor kept;
  {
    CpuAllocationScope scope(64 * kMiB);
    EXPECT_THROW(CpuAllocationScope second, std::logic_error);
    kept = at::arange(1000, at::kFloat);
  }
  kept.resize_({100000});  // its allocator again, now passing through uncounted
  kept.fill_(2.0f);
  EXPECT_FLOAT_EQ(kept.sum().item<float>(), 200000.0f);
  at::Tensor huge = at::empty({64 * kMiB}, at::kFloat);  // 256 MiB: no cap outside a scope
  EXPECT_EQ(huge.numel(), 64 * kMiB);
}

// TorchScript's ops allocate through raw_allocate, which requires a DataPtr whose context is its
// data pointer and frees through raw_deleter: a scope must serve both (it once did not).
TEST(CpuAllocationScope, ServesRawAllocationsAsTorchScriptMakesThem) {
  CpuAllocationScope scope;
  c10::Allocator* allocator = c10::GetCPUAllocator();
  void* raw = allocator->raw_allocate(3 * kMiB);
  ASSERT_NE(raw, nullptr);
  EXPECT_GE(scope.liveBytes(), 3 * kMiB);
  static_cast<char*>(raw)[3 * kMiB - 1] = 7;
  allocator->raw_deallocate(raw);
  EXPECT_LT(scope.liveBytes(), kMiB);
  EXPECT_GE(scope.peakBytes(), 3 * kMiB);
}

}  // namespace
}  // namespace mb
