#include "model/Recompute.h"

#include <mutex>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "common/Error.h"
#include "common/TorchCompat.h"

namespace mb::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The segment, kept alive by the autograd graph (a capsule in the context's saved data).
struct SegmentHolder : torch::CustomClassHolder {
  explicit SegmentHolder(Segment run) : run(std::move(run)) {}
  Segment run;
};

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

struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const Segment* segment) {
    const c10::DeviceType device = input.device().type();
    ctx->saved_data["segment"] =
        c10::IValue::make_capsule(c10::make_intrusive<SegmentHolder>(*segment));
    ctx->saved_data["rng"] = rngState(input.device());
    ctx->saved_data["autocast"] = compat::autocastEnabled(device);
    ctx->saved_data["autocast_dtype"] = static_cast<std::int64_t>(compat::autocastDtype(device));
    ctx->save_for_backward({input});
    at::Tensor output = (*segment)(input);  // grad mode is off here: nothing inside is kept
    ctx->saved_data["sizes"] = output.sizes().vec();
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(output.scalar_type());
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    const at::Tensor saved = ctx->get_saved_variables()[0];
    at::Tensor input = saved.detach().requires_grad_(saved.requires_grad());
    const auto holder = ctx->saved_data["segment"].toCapsule();
    const Segment& segment = static_cast<SegmentHolder*>(holder.get())->run;
    const c10::Device device = input.device();
    const at::Tensor rngNow = rngState(device);  // what later random draws continue from
    at::Tensor output;
    {
      setRngState(device, ctx->saved_data["rng"].toTensor());
      AutocastReplay autocast(
          device.type(), ctx->saved_data["autocast"].toBool(),
          static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt()));
      at::AutoGradMode grad(true);
      output = segment(input);
    }
    setRngState(device, rngNow);
    if (output.sizes().vec() != ctx->saved_data["sizes"].toIntVector() ||
        static_cast<std::int64_t>(output.scalar_type()) != ctx->saved_data["dtype"].toInt())
      throw RuntimeError(
          "train.recompute: a recomputed segment's output differs in shape or dtype "
          "from its first forward pass",
          "set train.recompute: none and report it: the model's segment is not "
          "deterministic in its shapes");
    torch::autograd::backward({output}, {gradOutputs[0]});
    return {input.requires_grad() ? input.grad() : at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor recomputed(const Segment& segment, const at::Tensor& input) {
  if (!c10::GradMode::is_enabled()) return segment(input);
  return RecomputeFunction::apply(input, &segment);
}

}  // namespace mb::model
