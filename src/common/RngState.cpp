#include "common/RngState.h"

#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>

namespace mb {
namespace {

at::Generator generatorOf(const c10::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device)
                          : at::detail::getDefaultCPUGenerator();
}

}  // namespace

at::Tensor generatorState(const c10::Device& device) {
  at::Generator generator = generatorOf(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void setGeneratorState(const c10::Device& device, const at::Tensor& state) {
  at::Generator generator = generatorOf(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

RngSnapshot::RngSnapshot(c10::Device device)
    : device_(device), cpu_(generatorState(c10::Device(c10::kCPU))) {
  if (device_.is_cuda()) deviceState_ = generatorState(device_);
}

void RngSnapshot::restore() const {
  setGeneratorState(c10::Device(c10::kCPU), cpu_);
  if (deviceState_.defined()) setGeneratorState(device_, deviceState_);
}

}  // namespace mb
