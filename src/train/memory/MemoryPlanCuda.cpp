// CUDA side of Note [Memory plan]: the caching allocator's statistics.
#include <c10/cuda/CUDACachingAllocator.h>

#include "train/memory/MemoryPlan.h"

namespace mb::train {
namespace {

c10::DeviceIndex planDeviceIndex(c10::Device device) {
  return device.has_index() ? device.index() : 0;
}

}  // namespace

void resetDevicePeak(c10::Device device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(planDeviceIndex(device));
}

std::int64_t deviceAllocatedBytes(c10::Device device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(planDeviceIndex(device));
  return stats.allocated_bytes[0].current;  // [0]: StatType::AGGREGATE
}

std::int64_t devicePeakBytes(c10::Device device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(planDeviceIndex(device));
  return stats.allocated_bytes[0].peak;
}

void releaseCachedDeviceMemory(c10::Device) {
  c10::cuda::CUDACachingAllocator::emptyCache();
}

}  // namespace mb::train
