// fp16 loss scaling across ranks (Note [Loss scaling]): an overflow on one rank only is seen by
// every rank after the gradient all-reduce, so all ranks skip the step and back off alike, and
// their scales never part. The real reducer and scaler, over the MPI data communicator.
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/Functions.h>
#include <gtest/gtest.h>

#include "dist/GradientReducer.h"
#include "tests/dist/TestModels.h"
#include "tests/mpi/MpiTestMain.h"
#include "tests/support/Device.h"
#include "train/precision/LossScaler.h"

namespace mb {
namespace {

TEST(LossScalerRanks, AnOverflowOnOneRankSkipsAndBacksOffOnEveryRank) {
  auto comm = test::dataCommunicator();
  const int rank = comm->rank();
  const int world = comm->size();
  ASSERT_GE(world, 2) << "register this test with np >= 2";
  torch::manual_seed(7);
  test::MlpStack model(4, 2);
  model->to(test::device());
  dist::synchronizeParameters(*comm, *model);
  dist::GradientReducer reducer(comm, model->parameters(), test::parameterNames(*model), {});
  LossScaleConfig config;
  config.init = 1024;
  config.growthInterval = 3;
  train::LossScaler scaler(config, test::device(), true);
  const auto options = at::TensorOptions().device(test::device());
  const int lastRank = world - 1;
  // Steps 2 and 3 overflow on the last rank only; the others grow the scale after 3 clean steps.
  const std::vector<bool> poisoned{false, true, true, false, false, false, false};
  std::vector<double> scales;
  for (std::size_t step = 0; step < poisoned.size(); ++step) {
    at::Tensor x = at::randn({4, 4}, options) + rank;
    reducer.prepareForBackward(true);
    at::Tensor loss = model->forward(x).pow(2).sum();
    if (poisoned[step] && rank == lastRank) loss = loss * std::numeric_limits<float>::infinity();
    scaler.scaleLoss(loss).backward();
    reducer.finishGradients();
    std::vector<at::Tensor> grads;
    for (const auto& p : model->parameters())
      grads.push_back(p.grad());
    const at::Tensor found = scaler.unscale(grads);
    EXPECT_EQ(found.item<float>(), poisoned[step] ? 1.0f : 0.0f)
        << "rank " << rank << " step " << step + 1 << ": found_inf";
    scaler.update(found);
    scales.push_back(scaler.scale());
    for (auto& g : grads)
      g.zero_();
  }
  const std::vector<double> expected{1024, 512, 256, 256, 256, 512, 512};
  EXPECT_EQ(scales, expected) << "rank " << rank;
  // Every rank holds the same sequence (the all-reduce of the scales equals W times each).
  at::Tensor mine = at::tensor(scales, at::kDouble).to(test::device());
  at::Tensor sum = mine.clone();
  comm->allReduce(sum, dist::ReduceOp::kSum, "scales");
  EXPECT_TRUE(at::equal(sum, mine * world))
      << "rank " << rank << ": the scales differ across ranks";
}

}  // namespace
}  // namespace mb
