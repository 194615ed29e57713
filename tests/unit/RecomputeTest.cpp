// Note [Activation recomputation] (model/Recompute.h): a recomputed segment gives the gradients
// of the plain one, dropout on; a weight that several segments share gets one gradient a
// backward pass (its hook fires once, as the gradient reducer needs); a tensor that needs a
// gradient but was not passed to the segment is an error rather than a lost gradient. CPU.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "model/Recompute.h"

namespace mb::model {
namespace {

// Counts the runs of a weight's AccumulateGrad, where the gradient reducer's hook sits.
class CountingHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit CountingHook(int* calls) : calls_(calls) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    ++*calls_;
    return outputs;
  }

 private:
  int* calls_;
};

struct SharedWeight {
  at::Tensor weight = at::randn({6, 6}).requires_grad_(true);
  int hookCalls = 0;
  std::shared_ptr<torch::autograd::Node> accumulator =
      torch::autograd::impl::grad_accumulator(weight);
  SharedWeight() { accumulator->add_post_hook(std::make_unique<CountingHook>(&hookCalls)); }
  Segment layer() const {
    return [w = weight](const at::Tensor& in) {
      return at::dropout(at::tanh(in.matmul(w)), 0.3, true);
    };
  }
};

// Three layers with one weight, the first two recomputed or not, from the same random numbers.
at::Tensor gradientOf(SharedWeight& shared, const at::Tensor& x, bool recompute,
                      const std::vector<at::Tensor>& passed) {
  shared.weight.mutable_grad() = at::Tensor();
  shared.hookCalls = 0;
  at::manual_seed(3);
  at::Tensor h = x;
  for (int i = 0; i < 2; ++i)
    h = recompute ? recomputed(shared.layer(), h, passed) : shared.layer()(h);
  shared.layer()(h).square().sum().backward();
  return shared.weight.grad().clone();
}

TEST(RecomputeSegments, ASharedWeightGetsTheGradientOfThePlainRunOnce) {
  at::manual_seed(1);
  SharedWeight shared;
  at::Tensor x = at::randn({5, 6}).requires_grad_(true);
  at::Tensor plain = gradientOf(shared, x, false, {});
  EXPECT_EQ(shared.hookCalls, 1);
  at::Tensor plainInput = x.grad().clone();
  x.mutable_grad() = at::Tensor();
  at::Tensor again = gradientOf(shared, x, true, {shared.weight});
  EXPECT_EQ(shared.hookCalls, 1);  // not once per segment
  EXPECT_TRUE(at::equal(plain, again));
  EXPECT_TRUE(at::equal(plainInput, x.grad()));
}

std::string backwardError(SharedWeight& shared, const at::Tensor& x,
                          const std::vector<at::Tensor>& passed) {
  try {
    gradientOf(shared, x, true, passed);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(RecomputeSegments, ATensorThatNeedsAGradientButWasNotPassedIsAnError) {
  at::manual_seed(2);
  SharedWeight shared;
  at::Tensor x = at::randn({5, 6});
  EXPECT_NE(backwardError(shared, x, {}).find("was not passed to it"), std::string::npos);
  // A tensor with history captured by the segment instead of taken as its input.
  at::Tensor scale = (shared.weight * 2).sum();
  Segment capturing = [scale](const at::Tensor& in) { return in * scale; };
  at::Tensor out = recomputed(capturing, x, {shared.weight});
  std::string error = "no error";
  try {
    out.sum().backward();
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("uses a tensor computed before it"), std::string::npos) << error;
}

}  // namespace
}  // namespace mb::model
