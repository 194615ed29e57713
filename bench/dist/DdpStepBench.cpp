// DDP step time on CPU: forward + backward (+ bucketed gradient all-reduce) + AdamW, on the
// LSTM demo shape (LSTM over 60 steps, hidden 32, 8 features, batch 64 per rank).
//   mpirun -np 1 megabatch_bench_ddp_step --plain   # baseline: plain LibTorch, no reducer
//   mpirun -np 2 megabatch_bench_ddp_step           # DDP: same per-rank batch, 2 ranks
// Prints the median step time (slowest rank) of the timed steps as "median_step_ms=...".
// bench/dist/run_dist_bench.py runs both side by side, repeatedly, and reports the ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include "dist/GradientReducer.h"
#include "dist/Runtime.h"
#include "tests/dist/TestModels.h"

namespace {

using Clock = std::chrono::steady_clock;

bool hasFlag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return true;
  return false;
}

int intArg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  mb::dist::Runtime runtime(&argc, &argv);
  bool plain = hasFlag(argc, argv, "--plain");
  int threads = intArg(argc, argv, "--threads", 1);
  int warmup = intArg(argc, argv, "--warmup", 5);
  int steps = intArg(argc, argv, "--steps", 30);
  int batch = intArg(argc, argv, "--batch", 64);
  at::set_num_threads(threads);

  constexpr std::int64_t kTime = 60, kFeatures = 8, kHidden = 32;
  torch::manual_seed(1);
  mb::test::SeqNet model(kFeatures, kHidden, 1);
  auto comm = runtime.makeDataCommunicator(mb::BackendKind::kAuto, "cpu", 0);
  std::unique_ptr<mb::dist::GradientReducer> reducer;
  if (!plain) {
    mb::dist::synchronizeParameters(*comm, *model);
    reducer = std::make_unique<mb::dist::GradientReducer>(
        comm, model->parameters(), mb::test::parameterNames(*model), mb::dist::ReducerOptions{});
  }
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  at::Tensor x = at::randn({batch, kTime, kFeatures});  // [B, T, F]
  at::Tensor y = at::randn({batch, 1});
  double globalBatch = static_cast<double>(batch) * runtime.size();

  std::vector<double> times;
  for (int step = 0; step < warmup + steps; ++step) {
    auto start = Clock::now();
    optimizer.zero_grad();
    if (reducer) reducer->prepareForBackward(true);
    ((model->forward(x) - y).pow(2).sum() / globalBatch).backward();
    if (reducer) reducer->finishGradients();
    optimizer.step();
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (step >= warmup) times.push_back(seconds);
  }
  // The slowest rank's median defines the step time.
  std::sort(times.begin(), times.end());
  at::Tensor median = at::full({1}, times[times.size() / 2], at::kDouble);
  runtime.control().allReduce(median, mb::dist::ReduceOp::kMax, "bench median");
  if (runtime.rank() == 0)
    std::printf("ranks=%d plain=%d threads=%d batch_per_rank=%d median_step_ms=%.3f\n",
                runtime.size(), plain ? 1 : 0, threads, batch, median.item<double>() * 1e3);
  return 0;
}
