// lstm: shapes and heads, stateful lanes (Note [Stateful lanes] in Lstm.h), bf16 autocast, time
// segments (Note [LSTM time segments]). On test::device() (Note [Test device]).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "model/Model.h"
#include "model/kinds/Lstm.h"
#include "tests/unit/ModelFixtures.h"

namespace mb::model {
namespace {

StatefulLanes* lanesOf(Model& model) {
  return capability<StatefulLanes>(model);
}

const std::vector<data::InputSpec> kStreams{{"m1", 10, 5}, {"m5", 6, 3}, {"h1", 4, 2}};

TEST(LstmShapes, RegressionClassificationAndMultiTarget) {
  at::manual_seed(1);
  auto info = test::seriesInfo(kStreams);
  auto model = test::deviceModel(test::lstmConfig(), info, 1);
  auto batch = test::randomBatch(info, 5);
  at::Tensor out = model->forward(batch);
  EXPECT_EQ(out.sizes(), (at::IntArrayRef{5}));
  EXPECT_EQ(model->termsPerSample(), 1);
  EXPECT_NEAR(model->lossSum(out, batch).item<double>(),
              (out - batch.targets).square().sum().item<double>(), 1e-5);

  auto multi = test::seriesInfo(kStreams, 3);
  auto regression = test::deviceModel(test::lstmConfig(), multi, 1);
  EXPECT_EQ(regression->forward(test::randomBatch(multi, 5)).sizes(), (at::IntArrayRef{5, 3}));
  EXPECT_EQ(regression->termsPerSample(), 3);

  auto labels = test::seriesInfo({{"features", 8, 4}}, 0, 6);
  auto config = test::lstmConfig();
  config.task = Task::kClassification;
  config.headHidden = 0;
  auto classifier = test::deviceModel(config, labels, 1);
  auto labelled = test::randomBatch(labels, 5);
  at::Tensor logits = classifier->forward(labelled);
  EXPECT_EQ(logits.sizes(), (at::IntArrayRef{5, 6}));
  auto metrics = classifier->metricSums(logits, labelled);
  ASSERT_EQ(metrics[0].first, "accuracy");
  EXPECT_TRUE(classifier->named_parameters().contains("encoders.features.weight_ih_l1"));
  EXPECT_TRUE(classifier->named_parameters().contains("head.0.weight"));
}

TEST(LstmShapes, HuberLossAndMetrics) {
  auto info = test::seriesInfo(kStreams, 2);
  auto config = test::lstmConfig();
  config.loss = LossKind::kHuber;
  config.huberDelta = 0.3;
  auto model = test::deviceModel(config, info, 1);
  auto batch = test::randomBatch(info, 4);
  at::Tensor out = model->forward(batch);
  at::Tensor e = (out - batch.targets).abs();
  double huber = at::where(e < 0.3, 0.5 * e * e, 0.3 * (e - 0.15)).sum().item<double>();
  EXPECT_NEAR(model->lossSum(out, batch).item<double>(), huber, 1e-5);
  auto metrics = model->metricSums(out, batch);
  EXPECT_EQ(metrics[0].first, "mse");
  EXPECT_NEAR(metrics[1].second.item<double>(), e.sum().item<double>(), 1e-5);
}

TEST(LstmShapes, RejectsInputsWithoutTimeAxisAndBadTargets) {
  EXPECT_THROW(buildModel(test::lstmConfig(), test::seriesInfo({{"features", 0, 7}}), 1),
               ConfigError);
  auto config = test::lstmConfig();
  config.task = Task::kClassification;
  EXPECT_THROW(buildModel(config, test::seriesInfo(kStreams, 0, 1), 1), ConfigError);
  auto model = test::deviceModel(test::lstmConfig(), test::seriesInfo(kStreams), 1);
  auto batch = test::randomBatch(test::seriesInfo(kStreams), 3);
  at::Tensor out = model->forward(batch);
  batch.targets = at::randn({3, 2}, at::TensorOptions().device(test::device()));
  EXPECT_THROW(model->lossSum(out, batch), RuntimeError);
}

// Stateful: a window, then the next one, carried per lane, equals one stateless pass over
// the two windows joined.
TEST(LstmStateful, CarriesStatePerLaneLikeOneLongSequence) {
  at::manual_seed(3);
  auto config = test::lstmConfig();
  config.stateful = true;
  auto info = test::seriesInfo({{"m1", 6, 3}});
  auto stateful = test::deviceModel(config, info, 11);
  config.stateful = false;
  auto joined = test::deviceModel(config, test::seriesInfo({{"m1", 12, 3}}), 11);

  at::Tensor first = at::randn({2, 6, 3}).to(test::device());
  at::Tensor second = at::randn({2, 6, 3}).to(test::device());
  data::Batch a, b;
  a.inputs = {first};
  a.lanes = at::tensor(std::vector<std::int64_t>{3, 0}).to(test::device());
  b.inputs = {second.flip(0)};  // the rows come in the other lane order
  b.lanes = at::tensor(std::vector<std::int64_t>{0, 3}).to(test::device());
  stateful->forward(a).sum().backward();
  at::Tensor out = stateful->forward(b);
  out.sum().backward();  // the carried state is detached: no second pass through batch a

  data::Batch whole;
  whole.inputs = {at::cat({first, second}, 1)};
  at::Tensor expected = joined->forward(whole).flip(0);
  // Two 6-step passes against one 12-step pass: other kernels on the GPU.
  EXPECT_LT((out - expected).abs().max().item<double>(), test::tolerance(1e-5, 1e-4));

  auto state = lanesOf(*stateful)->extraState();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "lstm_state.m1.h");
  EXPECT_EQ(state[0].second.sizes(), (at::IntArrayRef{2, 4, 8}));  // [layers, lanes, hidden]
  // Lanes 1 and 2 never ran: zero, so a sum over ranks assembles every lane.
  EXPECT_EQ(state[0].second.select(1, 1).abs().sum().item<double>(), 0.0);
}

TEST(LstmStateful, ExtraStateRoundTripsAndResets) {
  at::manual_seed(4);
  auto config = test::lstmConfig();
  config.stateful = true;
  auto info = test::seriesInfo({{"m1", 5, 3}, {"h1", 3, 2}});
  auto model = test::deviceModel(config, info, 2);
  auto copy = test::deviceModel(config, info, 2);
  auto batch = test::randomBatch(info, 3);
  batch.lanes = at::arange(3, at::kLong).to(test::device());
  model->forward(batch);
  lanesOf(*copy)->loadExtraState(lanesOf(*model)->extraState());
  EXPECT_TRUE(at::equal(model->forward(batch), copy->forward(batch)));

  lanesOf(*model)->resetState();
  EXPECT_TRUE(lanesOf(*model)->extraState().empty());
  model->eval();
  data::Batch noLanes = batch;
  noLanes.lanes = at::Tensor();
  at::Tensor fresh = model->forward(noLanes);  // evaluation without lanes: zero state
  EXPECT_FALSE(at::allclose(fresh, copy->forward(batch)));
  model->train();
  EXPECT_THROW(model->forward(noLanes), RuntimeError);

  auto state = lanesOf(*model)->extraState();
  EXPECT_THROW(lanesOf(*copy)->loadExtraState({{"lstm_state.m9.h", at::zeros({2, 3, 8})}}),
               CheckpointError);
  EXPECT_THROW(lanesOf(*copy)->loadExtraState({{"lstm_state.m1.h", at::zeros({1, 3, 8})}}),
               CheckpointError);
  EXPECT_THROW(lanesOf(*copy)->loadExtraState({{"lstm_state.m1.h", at::zeros({2, 3, 8})}}),
               CheckpointError);
  auto stateless = test::deviceModel(test::lstmConfig(), info, 2);
  EXPECT_TRUE(lanesOf(*stateless)->extraState().empty());
  EXPECT_THROW(lanesOf(*stateless)->loadExtraState(lanesOf(*copy)->extraState()), CheckpointError);
}

// The trainer sizes the lanes of the whole run on every rank, so extra states agree in shape
// across ranks (broadcast at a resume, summed for a checkpoint).
TEST(LstmStateful, LaneCountSizesTheStateAndChecksALoadedOne) {
  auto config = test::lstmConfig();
  config.stateful = true;
  auto info = test::seriesInfo({{"m1", 5, 3}});
  auto model = test::deviceModel(config, info, 2);
  lanesOf(*model)->setLaneCount(6);
  auto state = lanesOf(*model)->extraState();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[1].second.sizes(), (at::IntArrayRef{2, 6, 8}));
  EXPECT_EQ(state[1].second.abs().sum().item<double>(), 0.0);
  auto batch = test::randomBatch(info, 2);
  batch.lanes = at::tensor(std::vector<std::int64_t>{4, 1}).to(test::device());
  model->forward(batch);
  lanesOf(*model)->setLaneCount(6);  // keeps the carried state
  EXPECT_GT(lanesOf(*model)->extraState()[0].second.select(1, 4).abs().sum().item<double>(), 0.0);
  EXPECT_THROW(lanesOf(*model)->setLaneCount(8), CheckpointError);
  lanesOf(*model)->resetState();
  lanesOf(*model)->setLaneCount(8);
  EXPECT_EQ(lanesOf(*model)->extraState()[0].second.sizes(), (at::IntArrayRef{2, 8, 8}));
  auto stateless = test::deviceModel(test::lstmConfig(), info, 2);
  lanesOf(*stateless)->setLaneCount(6);
  EXPECT_TRUE(lanesOf(*stateless)->extraState().empty());
}

// On the CPU, or on CUDA under MEGABATCH_TEST_DEVICE=cuda.
TEST(LstmAutocast, Bf16TrainsCloseToFp32AndTakesBf16Inputs) {
  at::manual_seed(5);
  auto info = test::seriesInfo(kStreams);
  auto model = test::deviceModel(test::lstmConfig(16, 2), info, 3);
  auto batch = test::randomBatch(info, 8);
  double fp32 = model->lossSum(model->forward(batch), batch).item<double>();
  const c10::DeviceType where = test::device().type();
  compat::setAutocast(where, true, at::kBFloat16);
  at::Tensor loss = model->lossSum(model->forward(batch), batch);
  loss.backward();
  compat::setAutocast(where, false, at::kBFloat16);
  compat::clearAutocastCache();
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  EXPECT_NEAR(loss.item<double>(), fp32, 0.03 * fp32 + 1e-3);
  for (const auto& p : model->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_TRUE(p.grad().isfinite().all().item<bool>());
  }
  // Resident data kept in bf16 (data.resident_dtype) meets fp32 weights without autocast.
  data::Batch half = batch;
  for (auto& x : half.inputs)
    x = x.to(at::kBFloat16);
  EXPECT_NEAR(model->lossSum(model->forward(half), half).item<double>(), fp32, 0.03 * fp32 + 1e-3);
}

// Note [LSTM time segments]: the gradients of time segments, recomputed or not, equal one pass
// over the window within rounding, dropout on (the masks are drawn as LibTorch's LSTM draws them;
// on CUDA cuDNN draws its own, so there without dropout).
std::vector<at::Tensor> gradientsOf(Model& model, const data::Batch& batch, std::uint64_t seed) {
  model.zero_grad();
  at::manual_seed(seed);
  model.lossSum(model.forward(batch), batch).backward();
  std::vector<at::Tensor> grads;
  for (const auto& p : model.parameters())
    grads.push_back(p.grad().clone());
  return grads;
}

void expectCloseGradients(const std::vector<at::Tensor>& expected,
                          const std::vector<at::Tensor>& got, const std::string& what) {
  ASSERT_EQ(expected.size(), got.size());
  double worst = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double largest = expected[i].abs().max().item<double>();
    const double off = (expected[i] - got[i]).abs().max().item<double>();
    EXPECT_LE(off, test::tolerance(1e-5, 1e-3) * largest) << what << ", tensor " << i;
    worst = std::max(worst, off / std::max(largest, 1e-30));
  }
  std::cout << what << ": the largest gradient difference is " << worst
            << " of the tensor's largest gradient\n";
}

ModelConfig droppingLstmConfig() {
  auto config = test::lstmConfig(16, 3);
  config.dropout = test::device().is_cpu() ? 0.2 : 0.0;
  return config;
}

// Note [oneDNN LSTM inference]: hidden 16 is one of the sizes LibTorch 2.6's oneDNN gets wrong
// outside grad mode on an AVX-512 EPYC; evaluation must give what grad mode gives.
TEST(LstmEval, OutsideGradModeGivesTheOutputsOfGradMode) {
  at::manual_seed(8);
  auto info = test::seriesInfo({{"m1", 10, 5}, {"m5", 6, 3}});
  for (std::int64_t hidden : {16, 32}) {
    auto model = test::deviceModel(test::lstmConfig(hidden, 2), info, 6);
    model->eval();
    auto batch = test::randomBatch(info, 6);
    at::Tensor graded = model->forward(batch).detach();
    at::NoGradGuard noGrad;
    EXPECT_LT((model->forward(batch) - graded).abs().max().item<double>(),
              test::tolerance(1e-5, 1e-3))
        << "hidden " << hidden;
  }
}

TEST(LstmRecompute, TimeSegmentsGiveTheGradientsOfOnePassWithinRounding) {
  at::manual_seed(6);
  auto info = test::seriesInfo({{"m1", 40, 5}, {"m5", 12, 3}, {"h1", 3, 2}});
  auto batch = test::randomBatch(info, 6);
  auto plain = test::deviceModel(droppingLstmConfig(), info, 4);
  auto expected = gradientsOf(*plain, batch, 9);
  auto& segments = dynamic_cast<Recomputable&>(*plain);
  EXPECT_EQ(segments.segmentCount(), 6);  // 40 steps in segments of 7
  for (std::int64_t every : {1, 2}) {
    segments.setRecomputeEvery(every);
    expectCloseGradients(expected, gradientsOf(*plain, batch, 9), "every " + std::to_string(every));
  }
  plain->eval();  // evaluation runs in one pass: the same output as without segments
  at::NoGradGuard noGrad;
  at::Tensor segmented = plain->forward(batch);
  segments.setRecomputeEvery(0);
  EXPECT_TRUE(at::equal(segmented, plain->forward(batch)));
}

TEST(LstmRecompute, StatefulLanesCarryTheStateOfOnePass) {
  at::manual_seed(7);
  auto config = droppingLstmConfig();
  config.stateful = true;
  auto info = test::seriesInfo({{"m1", 30, 4}});
  auto plain = test::deviceModel(config, info, 5);
  auto segmented = test::deviceModel(config, info, 5);
  dynamic_cast<Recomputable&>(*segmented).setRecomputeEvery(1);
  for (int round = 0; round < 2; ++round) {  // the second starts from the carried state
    auto batch = test::randomBatch(info, 4);
    batch.lanes = at::tensor(std::vector<std::int64_t>{2, 0, 3, 1}).to(test::device());
    auto expected = gradientsOf(*plain, batch, 10 + round);
    expectCloseGradients(expected, gradientsOf(*segmented, batch, 10 + round),
                         "stateful, round " + std::to_string(round));
    at::Tensor want = lanesOf(*plain)->extraState()[0].second;
    at::Tensor got = lanesOf(*segmented)->extraState()[0].second;
    EXPECT_LT((want - got).abs().max().item<double>(), test::tolerance(1e-6, 1e-4));
  }
}

}  // namespace
}  // namespace mb::model
