// CUDA side of Note [Memory plan]: the caching allocator's statistics and the CUDA generator.
#include <mutex>

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "train/MemoryPlan.h"

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

at::Tensor deviceRngState(c10::Device device) {
  at::Generator gen = at::cuda::detail::getDefaultCUDAGenerator(planDeviceIndex(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void setDeviceRngState(c10::Device device, const at::Tensor& state) {
  at::Generator gen = at::cuda::detail::getDefaultCUDAGenerator(planDeviceIndex(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace mb::train
