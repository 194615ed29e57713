#include "model/Recompute.h"

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>

#include "common/Error.h"
#include "common/TorchCompat.h"

namespace mb::model {
namespace {

using torch::autograd::variable_list;

// The default generator of `device` (dropout's): the CPU's, or the CUDA device's (through the
// context, so this file needs no CUDA headers).
at::Generator generatorOf(const c10::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device)
                          : at::detail::getDefaultCPUGenerator();
}

at::Tensor rngState(const c10::Device& device) {
  at::Generator generator = generatorOf(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void setRngState(const c10::Device& device, const at::Tensor& state) {
  at::Generator generator = generatorOf(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// The autocast state of one device type, set for a scope and put back after it.
class AutocastReplay {
 public:
  AutocastReplay(c10::DeviceType device, bool enabled, at::ScalarType dtype)
      : device_(device),
        wasEnabled_(compat::autocastEnabled(device)),
        wasDtype_(compat::autocastDtype(device)) {
    compat::setAutocast(device_, enabled, dtype);
  }
  ~AutocastReplay() { compat::setAutocast(device_, wasEnabled_, wasDtype_); }
  AutocastReplay(const AutocastReplay&) = delete;
  AutocastReplay& operator=(const AutocastReplay&) = delete;

 private:
  c10::DeviceType device_;
  bool wasEnabled_;
  at::ScalarType wasDtype_;
};

// The backward node of one recomputed segment: its input (detached), and what the first forward
// pass ran under. A node of its own rather than torch::autograd::Function: it is made whenever
// grad mode is on, also when the input needs no gradient (the parameters inside still do), and
// Function::apply trips GCC 14's -Warray-bounds in LibTorch 2.6's header.
class RecomputeBackward : public torch::autograd::Node {
 public:
  RecomputeBackward(Segment segment, const at::Tensor& input)
      : segment_(std::move(segment)),
        input_(input.detach()),
        inputNeedsGrad_(input.requires_grad()),
        device_(input.device()),
        rng_(rngState(device_)),
        autocast_(compat::autocastEnabled(device_.type())),
        autocastDtype_(compat::autocastDtype(device_.type())) {}

  void recordOutput(const at::Tensor& output) {
    sizes_ = output.sizes().vec();
    dtype_ = output.scalar_type();
  }

  std::string name() const override { return "mb::model::RecomputeBackward"; }
  void release_variables() override { input_.reset(); }

  variable_list apply(variable_list&& gradOutputs) override {
    if (!input_.defined())
      throw RuntimeError("train.recompute: a recomputed segment's backward ran twice",
                         "do not call backward twice through a recomputed segment");
    at::Tensor input = input_.detach().requires_grad_(inputNeedsGrad_);
    const at::Tensor rngNow = rngState(device_);  // what later random draws continue from
    at::Tensor output;
    {
      setRngState(device_, rng_);
      AutocastReplay autocast(device_.type(), autocast_, autocastDtype_);
      at::AutoGradMode grad(true);
      output = segment_(input);
    }
    setRngState(device_, rngNow);
    if (output.sizes().vec() != sizes_ || output.scalar_type() != dtype_)
      throw RuntimeError(
          "train.recompute: a recomputed segment's output differs in shape or "
          "dtype from its first forward pass",
          "set train.recompute: none and report it: the model's segment is not "
          "deterministic in its shapes");
    if (gradOutputs[0].defined()) torch::autograd::backward({output}, {gradOutputs[0]});
    return {inputNeedsGrad_ ? input.grad() : at::Tensor()};
  }

 private:
  Segment segment_;
  at::Tensor input_;
  bool inputNeedsGrad_;
  c10::Device device_;
  at::Tensor rng_;
  bool autocast_;
  at::ScalarType autocastDtype_;
  std::vector<std::int64_t> sizes_;
  at::ScalarType dtype_ = at::kFloat;
};

}  // namespace

at::Tensor recomputed(const Segment& segment, const at::Tensor& input) {
  if (!c10::GradMode::is_enabled()) return segment(input);
  auto node = std::shared_ptr<RecomputeBackward>(new RecomputeBackward(segment, input),
                                                 torch::autograd::deleteNode);
  at::Tensor output;
  {
    at::AutoGradMode noGrad(false);  // nothing inside the segment is kept
    output = segment(input);
  }
  node->recordOutput(output);
  node->set_next_edges(torch::autograd::collect_next_edges(input));
  torch::autograd::create_gradient_edge(output, node);
  return output;
}

}  // namespace mb::model
