// GradientReducer in one process (single-process communicator): bucket layout, gradients as
// bucket views, no_sync micro-steps, parameters without gradients, bf16 transport, misuse.
// Models and inputs live on test::device() (Note [Test device]).
// Multi-rank equivalence with a single process lives in tests/mpi/DdpTest.cpp.
#include <gtest/gtest.h>

#include <ATen/Functions.h>
#include <torch/optim/adamw.h>

#include "common/Error.h"
#include "dist/GradientReducer.h"
#include "dist/SingleCommunicator.h"
#include "tests/dist/TestModels.h"
#include "tests/support/Device.h"

namespace mb {
namespace {

using dist::GradientReducer;
using dist::ReducerOptions;

std::shared_ptr<dist::Communicator> single() {
  return std::make_shared<dist::SingleCommunicator>();
}

at::TensorOptions on() {
  return at::TensorOptions().device(test::device());
}

// `depth` linear layers of `width` on the test device.
test::MlpStack deviceMlp(std::int64_t width, int depth) {
  test::MlpStack model(width, depth);
  model->to(test::device());
  return model;
}

GradientReducer makeReducer(torch::nn::Module& module, ReducerOptions options = {}) {
  return GradientReducer(single(), module.parameters(), test::parameterNames(module), options);
}

// Plain LibTorch gradients of the same loss, for comparison.
std::vector<at::Tensor> referenceGrads(test::MlpStack& model, const at::Tensor& x) {
  model->zero_grad();
  model->forward(x).pow(2).sum().backward();
  std::vector<at::Tensor> grads;
  for (auto& p : model->parameters())
    grads.push_back(p.grad().clone());
  model->zero_grad();
  for (auto& p : model->parameters())
    p.mutable_grad().reset();
  return grads;
}

TEST(GradientReducerLayout, ReverseOrderWithSmallFirstBucketAndCap) {
  torch::manual_seed(0);
  test::MlpStack model = deviceMlp(64, 6);  // each layer: weight 16 KiB + bias 256 B
  ReducerOptions options;
  options.firstBucketMb = 20.0 / 1024;  // one layer (16.25 KiB) fits, two do not
  options.bucketMb = 40.0 / 1024;       // two layers per bucket after the first
  auto reducer = makeReducer(*model, options);
  auto layout = reducer.bucketLayout();
  ASSERT_EQ(layout.size(), 4u);
  // Reverse registration order; a bucket closes when the next tensor would pass its cap.
  EXPECT_EQ(layout[0], (std::vector<std::string>{"fc5.bias", "fc5.weight", "fc4.bias"}));
  EXPECT_EQ(layout[1],
            (std::vector<std::string>{"fc4.weight", "fc3.bias", "fc3.weight", "fc2.bias"}));
  EXPECT_EQ(layout[3], (std::vector<std::string>{"fc0.weight"}));
  EXPECT_EQ(reducer.stats().buckets, 4);
}

TEST(GradientReducerLayout, OversizedParameterGetsItsOwnBucket) {
  test::MlpStack model = deviceMlp(128, 2);  // weight 64 KiB each
  ReducerOptions options;
  options.firstBucketMb = 1.0 / 1024;
  options.bucketMb = 8.0 / 1024;
  auto layout = makeReducer(*model, options).bucketLayout();
  ASSERT_EQ(layout.size(), 4u);  // fc1.bias | fc1.weight | fc0.bias | fc0.weight
  EXPECT_EQ(layout[1], (std::vector<std::string>{"fc1.weight"}));
}

TEST(GradientReducerGrads, MatchPlainBackwardAndStayBucketViews) {
  torch::manual_seed(1);
  test::MlpStack model = deviceMlp(16, 3);
  at::Tensor x = at::randn({5, 16}, on());
  auto expected = referenceGrads(model, x);

  ReducerOptions options;
  options.bucketMb = options.firstBucketMb = 1.0 / 1024;  // several buckets
  auto reducer = makeReducer(*model, options);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  for (int step = 0; step < 3; ++step) {
    optimizer.zero_grad();  // LibTorch 1.13 detach_()es every grad: views must allow it
    reducer.prepareForBackward(true);
    model->forward(x).pow(2).sum().backward();
    reducer.finishGradients();
    if (step == 0) {
      auto params = model->parameters();
      for (std::size_t i = 0; i < params.size(); ++i)
        EXPECT_TRUE(at::allclose(params[i].grad(), expected[i])) << "parameter " << i;
    }
    optimizer.step();
  }
  // The gradients live in the buckets: no reallocation happened across steps.
  auto first = model->parameters()[0].grad().data_ptr();
  optimizer.zero_grad();
  reducer.prepareForBackward(true);
  model->forward(x).pow(2).sum().backward();
  reducer.finishGradients();
  EXPECT_EQ(model->parameters()[0].grad().data_ptr(), first);
}

TEST(GradientReducerGrads, ResetGradientsAreRebound) {
  // LibTorch 2.x's zero_grad() sets grads to undefined; user code may assign new tensors.
  torch::manual_seed(2);
  test::MlpStack model = deviceMlp(8, 2);
  at::Tensor x = at::randn({3, 8}, on());
  auto expected = referenceGrads(model, x);
  auto reducer = makeReducer(*model);
  for (int step = 0; step < 2; ++step) {
    for (auto& p : model->parameters())
      p.mutable_grad().reset();
    reducer.prepareForBackward(true);
    model->forward(x).pow(2).sum().backward();
    reducer.finishGradients();
  }
  auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(at::allclose(params[i].grad(), expected[i])) << "parameter " << i;
}

TEST(GradientReducerGrads, NoBackwardGivesZerosAndUnusedParametersGetZeros) {
  test::MlpStack model = deviceMlp(8, 3);
  auto reducer = makeReducer(*model);
  // A rank with no samples: no prepare, no backward; finish must still produce gradients.
  reducer.finishGradients();
  for (auto& p : model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().abs().sum().item<float>(), 0.0f);
  }
  EXPECT_EQ(reducer.stats().launchedAtFinish, reducer.stats().buckets);

  // Only the last layer is used: the others' buckets are launched by finishGradients.
  reducer.prepareForBackward(true);
  model->layers.back()->forward(at::ones({2, 8}, on())).sum().backward();
  reducer.finishGradients();
  EXPECT_GT(model->layers.back()->weight.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(model->layers.front()->weight.grad().abs().sum().item<float>(), 0.0f);
}

TEST(GradientReducerGrads, MicroStepsAccumulateAndLaunchOnlyOnTheLast) {
  torch::manual_seed(3);
  test::MlpStack model = deviceMlp(8, 2);
  at::Tensor x = at::randn({6, 8}, on());
  auto expected = referenceGrads(model, x);
  auto reducer = makeReducer(*model);
  auto chunks = x.split(2);
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    bool last = k + 1 == chunks.size();
    reducer.prepareForBackward(last);
    model->forward(chunks[k]).pow(2).sum().backward();
    if (!last) {
      EXPECT_EQ(reducer.stats().launchedDuringBackward, 0) << "no_sync micro-step " << k;
    }
  }
  EXPECT_EQ(reducer.stats().launchedDuringBackward, reducer.stats().buckets);
  reducer.finishGradients();
  auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    // One pass over 6 rows against three over 2: on the GPU the sums run in another order.
    EXPECT_TRUE(at::allclose(params[i].grad(), expected[i], test::tolerance(1e-5, 1e-4), 1e-6))
        << "parameter " << i;
}

// bf16 and fp16 (dist.grad_dtype) round the gradients on the wire only: fp32 gradients arrive.
class GradientReducerTransport : public ::testing::TestWithParam<at::ScalarType> {};

TEST_P(GradientReducerTransport, RoundsOnlyInTransit) {
  const at::ScalarType wire = GetParam();
  torch::manual_seed(4);
  test::MlpStack model = deviceMlp(16, 2);
  at::Tensor x = at::randn({4, 16}, on());
  auto expected = referenceGrads(model, x);
  ReducerOptions options;
  options.transportType = wire;
  auto reducer = makeReducer(*model, options);
  reducer.prepareForBackward(true);
  model->forward(x).pow(2).sum().backward();
  reducer.finishGradients();
  auto params = model->parameters();
  bool rounded = false;
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].grad().scalar_type(), at::kFloat);
    at::Tensor onTheWire = expected[i].to(wire).to(at::kFloat);
    EXPECT_TRUE(at::equal(params[i].grad(), onTheWire)) << "parameter " << i;
    rounded = rounded || !at::equal(onTheWire, expected[i]);
  }
  EXPECT_TRUE(rounded) << "the wire dtype rounds some gradient (else the test shows nothing)";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GradientReducerTransport,
                         ::testing::Values(at::kBFloat16, at::kHalf),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

TEST(GradientReducerGrads, FrozenAndTiedParametersAreHandled) {
  test::MlpStack model = deviceMlp(8, 2);
  model->layers[0]->weight.set_requires_grad(false);
  auto params = model->parameters();
  auto names = test::parameterNames(*model);
  params.push_back(params.back());  // a tied weight listed twice
  names.push_back("tied");
  GradientReducer reducer(single(), params, names, {});
  std::size_t count = 0;
  for (const auto& bucket : reducer.bucketLayout())
    count += bucket.size();
  EXPECT_EQ(count, 3u);  // 4 parameters, one frozen, the tied copy once
  reducer.prepareForBackward(true);
  model->forward(at::ones({1, 8}, on())).sum().backward();
  EXPECT_NO_THROW(reducer.finishGradients());
}

TEST(GradientReducerMisuse, SecondBackwardOnTheLastMicroStepIsAnError) {
  test::MlpStack model = deviceMlp(8, 1);
  auto reducer = makeReducer(*model);
  reducer.prepareForBackward(true);
  model->forward(at::ones({1, 8}, on())).sum().backward();
  try {
    model->forward(at::ones({1, 8}, on())).sum().backward();
    FAIL() << "a second gradient after the bucket launched must be reported";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("second gradient"), std::string::npos) << e.what();
  }
  EXPECT_THROW(reducer.prepareForBackward(true), RuntimeError);
}

TEST(GradientReducerGrads, Fp64ParametersAreNotNarrowed) {
  torch::manual_seed(5);
  test::MlpStack model = deviceMlp(8, 2);
  model->to(at::kDouble);
  at::Tensor x = at::randn({3, 8}, on().dtype(at::kDouble));
  auto expected = referenceGrads(model, x);
  auto reducer = makeReducer(*model);  // default options: fp32 "transport" = uncompressed
  reducer.prepareForBackward(true);
  model->forward(x).pow(2).sum().backward();
  reducer.finishGradients();
  auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(at::equal(params[i].grad(), expected[i])) << "parameter " << i;
}

TEST(GradientReducerOptions, FromDistConfig) {
  DistConfig config;
  config.bucketMb = 8;
  config.firstBucketMb = 0.5;
  config.gradDtype = DType::kBf16;
  auto options = dist::reducerOptionsFrom(config);
  EXPECT_EQ(options.bucketMb, 8);
  EXPECT_EQ(options.firstBucketMb, 0.5);
  EXPECT_EQ(options.transportType, at::kBFloat16);
  EXPECT_EQ(dist::reducerOptionsFrom(DistConfig{}).transportType, at::kFloat);
  config.gradDtype = DType::kFp16;
  EXPECT_EQ(dist::reducerOptionsFrom(config).transportType, at::kHalf);
}

TEST(GradientReducerMisuse, UnsupportedTransportDtypeIsAConfigError) {
  test::MlpStack model = deviceMlp(4, 1);
  ReducerOptions options;
  options.transportType = at::kDouble;
  EXPECT_THROW(makeReducer(*model, options), ConfigError);
}

}  // namespace
}  // namespace mb
