// DDP equivalence (issue #4): W ranks, each with its share of a global batch, against one
// process with the whole batch, same data, fp32. The single-process reference runs on every
// rank without communication, so each rank checks itself. Also: unequal shares with an empty
// rank, gradient accumulation, bf16 transport, overlap, and control traffic between backward
// and finishGradients. Models and data on test::device(): under cuda every rank runs on cuda:0
// and gradients go over the MPI backend (Note [Test device]).
#include <numeric>

#include <gtest/gtest.h>

#include <ATen/Functions.h>
#include <torch/optim/adamw.h>

#include "dist/GradientReducer.h"
#include "tests/dist/TestModels.h"
#include "tests/mpi/MpiTestMain.h"
#include "tests/support/Device.h"

namespace mb {
namespace {

using dist::GradientReducer;
using dist::ReducerOptions;

constexpr std::int64_t kFeatures = 3;
constexpr std::int64_t kHidden = 8;
constexpr std::int64_t kOutputs = 2;
constexpr std::int64_t kTime = 6;
constexpr int kSteps = 20;

at::TensorOptions on() {
  return at::TensorOptions().device(test::device());
}

// Per-step sample counts of every rank; they sum to the global batch.
using Split = std::function<std::vector<std::int64_t>(int step, int world)>;

Split equalSplit(std::int64_t batch) {
  return [batch](int, int world) { return std::vector<std::int64_t>(world, batch / world); };
}

// Rank (step % W) gets nothing; the others share the batch unevenly (7 = 4+3, 3+2+2, ...).
Split unequalSplit(std::int64_t batch) {
  return [batch](int step, int world) {
    std::vector<std::int64_t> counts(world, 0);
    if (world == 1) return std::vector<std::int64_t>{batch};
    int empty = step % world;
    int others = world - 1;
    for (int r = 0, i = 0; r < world; ++r) {
      if (r == empty) continue;
      counts[r] = batch / others + (i++ < batch % others ? 1 : 0);
    }
    return counts;
  };
}

at::Tensor lossOf(test::SeqNet& model, const at::Tensor& x, const at::Tensor& y,
                  std::int64_t globalBatch) {
  // Normalised by the global count: summed gradients are then the global-batch mean.
  return (model->forward(x) - y).pow(2).sum() / static_cast<double>(globalBatch * kOutputs);
}

struct RunOptions {
  Split split;
  std::int64_t batch = 12;
  int microSteps = 1;
  at::ScalarType transport = at::kFloat;
};

struct Difference {
  double gradients = 0;   // largest per-tensor relative gradient difference over all steps
  double parameters = 0;  // largest per-tensor relative parameter difference after the last
};

double maxRelativeGradDifference(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.parameters();
  auto pb = b.parameters();
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    double scale = std::max(pb[i].grad().norm().item<double>(), 1e-12);
    worst = std::max(worst, (pa[i].grad() - pb[i].grad()).norm().item<double>() / scale);
  }
  return worst;
}

// Trains a DDP model and a single-process reference for kSteps AdamW steps. Adam is nearly
// invariant to the gradients' scale, so the gradients are compared too (a reducer that
// averaged instead of summing would barely move the parameters).
Difference trainAndCompare(const RunOptions& run) {
  auto comm = test::dataCommunicator();
  int rank = comm->rank();
  int world = comm->size();
  torch::manual_seed(100 + rank);  // different weights on every rank until synchronised
  test::SeqNet model(kFeatures, kHidden, kOutputs);
  model->to(test::device());
  dist::synchronizeParameters(*comm, *model);
  test::SeqNet reference(kFeatures, kHidden, kOutputs);
  reference->to(test::device());
  test::copyParameters(*model, *reference);

  torch::manual_seed(7);  // the same data on every rank
  at::Tensor xs = at::randn({kSteps, run.batch, kTime, kFeatures}, on());
  at::Tensor ys = at::randn({kSteps, run.batch, kOutputs}, on());

  ReducerOptions options;
  options.firstBucketMb = 0.5 / 1024;  // several buckets even for this small model
  options.bucketMb = 1.0 / 1024;
  options.transportType = run.transport;
  GradientReducer reducer(comm, model->parameters(), test::parameterNames(*model), options);
  EXPECT_GT(reducer.stats().buckets, 2);
  auto adamw = torch::optim::AdamWOptions(1e-2).weight_decay(0.01);
  torch::optim::AdamW optimizer(model->parameters(), adamw);
  torch::optim::AdamW referenceOptimizer(reference->parameters(), adamw);

  Difference difference;
  for (int step = 0; step < kSteps; ++step) {
    at::Tensor x = xs[step];
    at::Tensor y = ys[step];
    referenceOptimizer.zero_grad();
    lossOf(reference, x, y, run.batch).backward();

    auto counts = run.split(step, world);
    std::int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank, std::int64_t{0});
    std::int64_t mine = counts[rank];
    optimizer.zero_grad();
    // Micro-steps of this rank's share; some may be empty, the whole share may be empty.
    std::vector<std::int64_t> sizes;
    for (int k = 0; k < run.microSteps; ++k)
      sizes.push_back(mine / run.microSteps + (k < mine % run.microSteps ? 1 : 0));
    int last = -1;
    for (int k = 0; k < run.microSteps; ++k)
      if (sizes[k] > 0) last = k;
    for (int k = 0; k <= last; ++k) {
      if (sizes[k] == 0) continue;
      reducer.prepareForBackward(k == last);
      lossOf(model, x.narrow(0, offset, sizes[k]), y.narrow(0, offset, sizes[k]), run.batch)
          .backward();
      offset += sizes[k];
    }
    reducer.finishGradients();
    difference.gradients =
        std::max(difference.gradients, maxRelativeGradDifference(*model, *reference));
    optimizer.step();
    referenceOptimizer.step();
  }
  difference.parameters = test::maxRelativeDifference(*model, *reference);
  return difference;
}

// Under cuda, W ranks' partial sums and the one-process sum run through different cuDNN and
// cuBLAS kernels: 10x the CPU tolerance (Note [Test device]).
void expectEquivalent(const RunOptions& run, double gradTolerance = test::tolerance(1e-5, 1e-4),
                      double paramTolerance = test::tolerance(1e-5, 1e-4)) {
  Difference difference = trainAndCompare(run);
  EXPECT_LT(difference.gradients, gradTolerance) << "gradients (sum over ranks)";
  EXPECT_LT(difference.parameters, paramTolerance)
      << "parameters after " << kSteps << " AdamW steps";
}

TEST(DdpEquivalence, EqualSharesMatchOneProcessAfter20AdamWSteps) {
  RunOptions run;
  run.split = equalSplit(12);  // divisible by 1, 2, 3, 4
  expectEquivalent(run);
}

TEST(DdpEquivalence, UnequalSharesAndAnEmptyRankMatch) {
  RunOptions run;
  run.batch = 7;
  run.split = unequalSplit(7);
  expectEquivalent(run);
}

TEST(DdpEquivalence, GradientAccumulationMatches) {
  RunOptions run;
  run.split = equalSplit(12);
  run.microSteps = 3;
  expectEquivalent(run);
}

TEST(DdpEquivalence, AccumulationWithUnequalSharesMatches) {
  RunOptions run;
  run.batch = 7;
  run.split = unequalSplit(7);
  run.microSteps = 2;  // some micro-steps are empty
  expectEquivalent(run);
}

TEST(DdpEquivalence, Bf16TransportStaysClose) {
  RunOptions run;
  run.split = equalSplit(12);
  run.transport = at::kBFloat16;
  // bf16 keeps 8 bits of mantissa in transit, and each partial sum is rounded again.
  expectEquivalent(run, 5e-2, 2e-2);
}

TEST(DdpEquivalence, Fp16TransportStaysClose) {
  RunOptions run;
  run.split = equalSplit(12);
  run.transport = at::kHalf;
  // fp16 keeps 11 bits of mantissa in transit (and a narrower range: Note [Loss scaling]).
  expectEquivalent(run, 1e-2, 5e-3);
}

TEST(DdpOverlap, BucketsLaunchBeforeBackwardReturns) {
  auto comm = test::dataCommunicator();
  torch::manual_seed(11);
  test::MlpStack model(64, 8);
  model->to(test::device());
  dist::synchronizeParameters(*comm, *model);
  ReducerOptions options;
  options.firstBucketMb = 10.0 / 1024;
  options.bucketMb = 20.0 / 1024;  // one layer (16.25 KiB) per bucket
  GradientReducer reducer(comm, model->parameters(), test::parameterNames(*model), options);
  ASSERT_GE(reducer.stats().buckets, 8);
  for (int step = 0; step < 3; ++step) {
    auto before = reducer.stats().launchedDuringBackward;
    reducer.prepareForBackward(true);
    model->forward(at::randn({4, 64}, on())).sum().backward();
    // Only the reducer's hooks, which run inside backward(), count as launchedDuringBackward.
    EXPECT_EQ(reducer.stats().launchedDuringBackward - before, reducer.stats().buckets)
        << "every bucket launches from a hook when every gradient arrives";
    reducer.finishGradients();
  }
  EXPECT_EQ(reducer.stats().launchedAtFinish, 0);
}

TEST(DdpOrdering, ControlTrafficBetweenBackwardAndFinishIsSafe) {
  auto comm = test::dataCommunicator();
  if (comm->size() > 1 && !test::runtime().mpiThreadMultiple())
    GTEST_SKIP() << "needs MPI_THREAD_MULTIPLE (a separate data communicator)";
  int rank = comm->rank();
  torch::manual_seed(12);
  test::MlpStack model(16, 4);
  test::MlpStack reference(16, 4);
  model->to(test::device());
  reference->to(test::device());
  test::copyParameters(*model, *reference);
  ReducerOptions options;
  options.firstBucketMb = options.bucketMb = 1.0 / 1024;  // one tensor per bucket
  GradientReducer reducer(comm, model->parameters(), test::parameterNames(*model), options);

  // Rank 0 uses only the last layer: its other buckets launch at finishGradients, while the
  // other ranks launch every bucket during backward.
  auto localLoss = [](test::MlpStack& m, int r) {
    at::Tensor x = at::full({2, 16}, 0.1 * (r + 1), on());
    return r == 0 ? m->layers.back()->forward(x).sum() : m->forward(x).sum();
  };
  reducer.prepareForBackward(true);
  localLoss(model, rank).backward();
  at::Tensor control = at::full({3}, static_cast<float>(rank));
  test::runtime().control().allReduce(control, dist::ReduceOp::kSum, "between backward and finish");
  reducer.finishGradients();

  int w = comm->size();
  EXPECT_TRUE(at::all(control == w * (w - 1) / 2.0f).item<bool>());
  for (int r = 0; r < w; ++r)
    localLoss(reference, r).backward();  // the sum over ranks
  auto got = model->parameters();
  auto expected = reference->parameters();
  for (std::size_t i = 0; i < got.size(); ++i) {
    // Layers that no rank used have no reference gradient; the reducer reports zeros.
    at::Tensor want = expected[i].grad().defined() ? expected[i].grad() : at::zeros_like(got[i]);
    EXPECT_TRUE(at::allclose(got[i].grad(), want, test::tolerance(1e-5, 1e-4), 1e-6))
        << "parameter " << i;
  }
}

}  // namespace
}  // namespace mb
