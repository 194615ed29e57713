#include "model/Recompute.h"

#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ATen/SequenceNumber.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include "common/Error.h"
#include "common/RngState.h"
#include "common/TorchCompat.h"

namespace mb::model {
namespace {

using torch::autograd::variable_list;

// The autocast state of one device type, set for a scope and put back after it. Autocast's cache
// of casted weights is off meanwhile: the trainer clears it when its forward ends, and a weight
// cast cached here, in the backward pass, would outlive the optimizer's update of that weight and
// be taken by the next step's forward (caught by the bf16 test in py.train.recompute.*).
class AutocastReplay {
 public:
  AutocastReplay(c10::DeviceType device, bool enabled, at::ScalarType dtype)
      : device_(device),
        wasEnabled_(compat::autocastEnabled(device)),
        wasDtype_(compat::autocastDtype(device)),
        cacheWasEnabled_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
    compat::setAutocast(device_, enabled, dtype);
  }
  ~AutocastReplay() {
    compat::setAutocast(device_, wasEnabled_, wasDtype_);
    at::autocast::set_autocast_cache_enabled(cacheWasEnabled_);
  }
  AutocastReplay(const AutocastReplay&) = delete;
  AutocastReplay& operator=(const AutocastReplay&) = delete;

 private:
  c10::DeviceType device_;
  bool wasEnabled_;
  at::ScalarType wasDtype_;
  bool cacheWasEnabled_;
};

// Where the recomputed forward starts making autograd nodes: sequence numbers count per thread.
struct SegmentStart {
  std::uint64_t thread;
  std::uint64_t firstNode;
};

SegmentStart segmentStart() {
  return {at::RecordFunction::currentThreadId(), at::sequence_number::peek()};
}

bool madeSince(const torch::autograd::Node& node, const SegmentStart& start) {
  return node.thread_id() == start.thread && node.sequence_nr() >= start.firstNode &&
         node.sequence_nr() != UINT64_MAX;
}

// Every path back from the recomputed outputs must end in an input or a parameter passed to the
// segment. A tensor that needs a gradient but was not passed (a parameter left out, or a tensor
// with history captured by the segment) would silently get none: an error instead.
void checkEveryGradientReaches(const variable_list& roots, const variable_list& wrt,
                               const SegmentStart& start) {
  std::unordered_set<const c10::TensorImpl*> passed;
  for (const auto& tensor : wrt)
    passed.insert(tensor.unsafeGetTensorImpl());
  std::vector<torch::autograd::Node*> pending;
  std::unordered_set<torch::autograd::Node*> seen;
  for (const auto& root : roots)
    if (root.grad_fn()) pending.push_back(root.grad_fn().get());
  while (!pending.empty()) {
    torch::autograd::Node* node = pending.back();
    pending.pop_back();
    if (!seen.insert(node).second) continue;
    if (auto* leaf = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      if (passed.count(leaf->variable.unsafeGetTensorImpl()) == 0)
        throw RuntimeError(
            "train.recompute: a recomputed segment uses a tensor that needs a gradient but was "
            "not passed to it, so its gradient would be lost",
            "set train.recompute: none and report it (the model's segment lists its parameters)");
      continue;
    }
    if (!madeSince(*node, start))
      throw RuntimeError(
          "train.recompute: a recomputed segment uses a tensor computed before it (" +
              node->name() + ") instead of taking it as an input",
          "set train.recompute: none and report it");
    for (const auto& edge : node->next_edges())
      if (edge.function) pending.push_back(edge.function.get());
  }
}

// The backward node of one recomputed segment: its inputs (detached), and what the first forward
// pass ran under. A node of its own rather than torch::autograd::Function: it is made whenever
// grad mode is on, also when no input needs a gradient (the parameters inside still do), and
// Function::apply trips GCC 14's -Warray-bounds in LibTorch 2.6's header.
class RecomputeBackward : public torch::autograd::Node {
 public:
  RecomputeBackward(SegmentOfMany segment, const variable_list& inputs,
                    const variable_list& parameters)
      : segment_(std::move(segment)),
        parameters_(parameters),
        device_(inputs.front().device()),
        rng_(generatorState(device_)),
        autocast_(compat::autocastEnabled(device_.type())),
        autocastDtype_(compat::autocastDtype(device_.type())) {
    for (const auto& input : inputs) {
      inputs_.push_back(input.detach());
      inputNeedsGrad_.push_back(input.requires_grad());
    }
  }

  void recordOutputs(const variable_list& outputs) {
    for (const auto& output : outputs) {
      sizes_.push_back(output.sizes().vec());
      dtypes_.push_back(output.scalar_type());
    }
  }

  std::string name() const override { return "mb::model::RecomputeBackward"; }
  void release_variables() override {
    inputs_.clear();
    parameters_.clear();
  }

  // The gradients of the inputs, then of the parameters, by the edges set in recomputedMany: the
  // engine adds each parameter's gradients from every segment (and from the rest of the graph)
  // before its AccumulateGrad runs, once, as without recomputation; so the gradient reducer's
  // hook fires once per parameter and step even when segments share weights (an LSTM's time
  // segments). Accumulating inside (torch::autograd::backward here) would fire it per segment.
  variable_list apply(variable_list&& gradOutputs) override {
    if (inputs_.empty())
      throw RuntimeError("train.recompute: a recomputed segment's backward ran twice",
                         "do not call backward twice through a recomputed segment");
    variable_list inputs;
    for (std::size_t i = 0; i < inputs_.size(); ++i)
      inputs.push_back(inputs_[i].detach().requires_grad_(inputNeedsGrad_[i]));
    const SegmentStart start = segmentStart();
    variable_list outputs = recompute(inputs);
    variable_list roots, grads;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (!gradOutputs[i].defined() || !outputs[i].requires_grad()) continue;
      roots.push_back(outputs[i]);
      grads.push_back(gradOutputs[i]);
    }
    variable_list wrt;  // what needs a gradient, in edge order
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputNeedsGrad_[i]) wrt.push_back(inputs[i]);
    for (const auto& parameter : parameters_)
      if (parameter.requires_grad()) wrt.push_back(parameter);
    variable_list found;
    if (!roots.empty() && !wrt.empty()) {
      checkEveryGradientReaches(roots, wrt, start);
      found = torch::autograd::grad(roots, wrt, grads, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    variable_list result;
    std::size_t next = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i)
      result.push_back(inputNeedsGrad_[i] && !found.empty() ? found[next++] : at::Tensor());
    for (const auto& parameter : parameters_)
      result.push_back(parameter.requires_grad() && !found.empty() ? found[next++] : at::Tensor());
    return result;
  }

 private:
  // The segment again, under the first pass's random numbers and autocast; later random draws
  // continue from where they were.
  variable_list recompute(const variable_list& inputs) {
    const at::Tensor rngNow = generatorState(device_);
    variable_list outputs;
    {
      setGeneratorState(device_, rng_);
      AutocastReplay autocast(device_.type(), autocast_, autocastDtype_);
      at::AutoGradMode grad(true);
      outputs = segment_(inputs);
    }
    setGeneratorState(device_, rngNow);
    bool same = outputs.size() == sizes_.size();
    for (std::size_t i = 0; same && i < outputs.size(); ++i)
      same = outputs[i].sizes().vec() == sizes_[i] && outputs[i].scalar_type() == dtypes_[i];
    if (!same)
      throw RuntimeError(
          "train.recompute: a recomputed segment's output differs in shape or "
          "dtype from its first forward pass",
          "set train.recompute: none and report it: the model's segment is not "
          "deterministic in its shapes");
    return outputs;
  }

  SegmentOfMany segment_;
  variable_list parameters_;
  variable_list inputs_;
  std::vector<bool> inputNeedsGrad_;
  c10::Device device_;
  at::Tensor rng_;
  bool autocast_;
  at::ScalarType autocastDtype_;
  std::vector<std::vector<std::int64_t>> sizes_;
  std::vector<at::ScalarType> dtypes_;
};

}  // namespace

std::vector<at::Tensor> recomputedMany(const SegmentOfMany& segment,
                                       const std::vector<at::Tensor>& inputs,
                                       const std::vector<at::Tensor>& parameters) {
  if (!c10::GradMode::is_enabled()) return segment(inputs);
  auto node = std::shared_ptr<RecomputeBackward>(new RecomputeBackward(segment, inputs, parameters),
                                                 torch::autograd::deleteNode);
  variable_list outputs;
  {
    at::AutoGradMode noGrad(false);  // nothing inside the segment is kept
    outputs = segment(inputs);
  }
  node->recordOutputs(outputs);
  auto edges = torch::autograd::collect_next_edges(inputs);
  for (auto& edge : torch::autograd::collect_next_edges(parameters))
    edges.push_back(std::move(edge));
  node->set_next_edges(std::move(edges));
  for (auto& output : outputs)
    torch::autograd::create_gradient_edge(output, node);
  return outputs;
}

at::Tensor recomputed(const Segment& segment, const at::Tensor& input,
                      const std::vector<at::Tensor>& parameters) {
  // A copy of `segment`: the backward node keeps this wrapper past the call.
  auto one = [segment](const std::vector<at::Tensor>& inputs) {
    return std::vector<at::Tensor>{segment(inputs.front())};
  };
  return recomputedMany(one, {input}, parameters).front();
}

}  // namespace mb::model
