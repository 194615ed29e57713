// No host sync in the step loop except at log steps (issue 8, "Step loop on CUDA"): the Trainer
// runs with c10's CUDA sync-debug mode set to warn, and a warning handler counts the synchronising
// calls (item(), copies to the host, stream synchronisations). Two runs that differ only in the
// number of steps between their single log line must count the same: every extra step that
// synchronises adds to the longer run's count.
//
// The handler is per thread (c10), so this counts the syncs of the thread that runs the loop:
// the forward, the loss, the optimizer, the gradient norm, the data gather, and finishGradients.
// Syncs inside backward's device threads (the reducer's hooks) are not seen; with a world of one
// the reducer has nothing to send there anyway.
#include <string>

#include <gtest/gtest.h>

#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include "common/TorchCompat.h"
#include "config/ConfigLoader.h"
#include "tests/data/DataFiles.h"
#include "tests/gpu/GpuTest.h"
#include "train/Trainer.h"

namespace mb {
namespace {

class SyncCounter : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("synchronizing CUDA operation") != std::string::npos) {
      ++syncs;
    } else {
      c10::WarningHandler::process(warning);  // anything else is printed as usual
    }
  }
  std::int64_t syncs = 0;
};

constexpr const char* kConfig = R"(
data:
  layout: series
  streams: [{name: m1, window: 16}, {name: m5, window: 4}]
  canonical_shards: 4
model: {kind: lstm, hidden: 16, layers: 1, head_hidden: 16}
train: {global_batch: 16, eval_every: 0, precision: fp32, threads: 1, device: cuda}
run: {progress: lines, checkpoint_every: 0}
)";

// Host syncs counted on this thread during a whole `steps`-step run with one log line (at its
// last step), all within the first epoch.
std::int64_t countSyncs(const std::string& data, const std::string& runDir, std::int64_t steps) {
  std::vector<std::string> overrides{"data.path=" + data, "run.dir=" + runDir,
                                     "train.max_steps=" + std::to_string(steps),
                                     "run.log_every=" + std::to_string(steps)};
  Config config = parseConfig(kConfig, "HostSyncTest", overrides);
  SyncCounter counter;
  c10::WarningUtils::WarningHandlerGuard guard(&counter);
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  {
    train::Trainer trainer(config, test::gpuRuntime());
    EXPECT_EQ(trainer.run(), train::RunOutcome::kFinished);
  }
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  return counter.syncs;
}

TEST(GpuHostSync, StepLoopSyncsOnlyAtLogSteps) {
  test::TempDir dir;
  std::string data = dir.file("series.h5");
  test::writeSeriesFile(data, {});  // ~100 batches of 16 per epoch: 12 steps stay in epoch 0
  countSyncs(data, dir.file("warm-up"), 2);  // one-time initialisation (cuBLAS, cuDNN, allocator)
  std::int64_t shorter = countSyncs(data, dir.file("run-4"), 4);
  std::int64_t longer = countSyncs(data, dir.file("run-12"), 12);
  EXPECT_GT(shorter, 0) << "the counter must see the syncs that setup and logging do";
  EXPECT_EQ(longer, shorter) << "8 more steps added " << (longer - shorter)
                             << " host syncs: " << static_cast<double>(longer - shorter) / 8.0
                             << " per step (the step loop may sync only at log steps)";
  // The Trainer switched TF32 on for its runs; the other gpu tests compare true fp32.
  compat::setTf32(false);
}

}  // namespace
}  // namespace mb
