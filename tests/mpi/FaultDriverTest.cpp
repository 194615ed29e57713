// Not a test on its own: the process that tests/dist/test_watchdog_hang.py drives under
// mpirun with MEGABATCH_FAULT_HANG set. It trains with the gradient reducer until the injected
// hang in a gradient bucket makes the watchdog end every rank. Skipped without the variable.
// The model trains on test::device() (under cuda, over the MPI backend).
#include <chrono>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "common/Environment.h"
#include "dist/GradientReducer.h"
#include "dist/Watchdog.h"
#include "tests/dist/TestModels.h"
#include "tests/mpi/MpiTestMain.h"
#include "tests/support/Device.h"

namespace mb {
namespace {

TEST(FaultDriver, TrainUntilTheInjectedHang) {
  if (!env::get("MEGABATCH_FAULT_HANG"))
    GTEST_SKIP() << "driven by tests/dist/test_watchdog_hang.py (MEGABATCH_FAULT_HANG)";
  double timeout = std::atof(env::get("MB_TEST_WATCHDOG_S").value_or("5").c_str());
  dist::Watchdog::instance().setTimeout(timeout);
  if (env::get("MB_TEST_HANGING_ABORT_HOOK")) {
    // Stands in for an ncclCommAbort that blocks on a broken peer: the watchdog must give up on
    // it after Watchdog::kAbortHookSeconds and end the process anyway.
    dist::Watchdog::instance().addAbortHook(
        [] { std::this_thread::sleep_for(std::chrono::hours(1)); });
  }
  auto comm = test::dataCommunicator();
  test::MlpStack model(32, 4);
  model->to(test::device());
  dist::ReducerOptions options;
  options.firstBucketMb = options.bucketMb = 5.0 / 1024;  // one layer per bucket
  dist::GradientReducer reducer(comm, model->parameters(), test::parameterNames(*model), options);
  for (int step = 0; step < 100000; ++step) {
    reducer.prepareForBackward(true);
    model->forward(at::randn({8, 32}, at::TensorOptions().device(test::device()))).sum().backward();
    reducer.finishGradients();
  }
  FAIL() << "the injected hang should have ended this process";
}

}  // namespace
}  // namespace mb
