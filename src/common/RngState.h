#pragma once
// The state of LibTorch's default random generators (the ones dropout and randperm draw from),
// taken and put back. Three parts of a run need to draw the same random numbers twice: a trial
// step of the memory plan (Note [Memory plan]) and a step run again after running out of memory
// (Note [A step that runs out of memory is redone]) must leave the run as if they had not been
// tried, and a recomputed segment (Note [Activation recomputation]) must drop the same units
// as its first forward. The CUDA generator is reached through ATen's context, so no file here
// needs CUDA headers, and a CPU build compiles the same code.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace mb {

// The state of the default generator of `device`: the CPU's, or the CUDA device's.
at::Tensor generatorState(const c10::Device& device);
void setGeneratorState(const c10::Device& device, const at::Tensor& state);

// The default CPU generator's state and, on CUDA, the device's, put back by restore().
class RngSnapshot {
 public:
  explicit RngSnapshot(c10::Device device);
  void restore() const;

 private:
  c10::Device device_;
  at::Tensor cpu_;
  at::Tensor deviceState_;
};

}  // namespace mb
