#pragma once
// The rank-0 progress bar on a terminal (run.progress: auto | bar | lines):
//   step 1200/5000 [######------------] 24% | loss 1.402 | lr 3.2e-3 | 1850 samples/s | eta 2m03s |
//   mem 218 MiB
// It is redrawn at most a few times a second from rank-local timings, so it costs no host sync
// or collective; the loss shown is the one of the last log line (which did the reduction).
// In log mode (no bar) rank 0 writes a line when no step line came for 30 s of the progress clock
// (common/WorkProgress.h), so a run with slow steps or a long run.log_every still shows it lives:
//   train: 0% (5/20000 steps) | 0.0939 steps/s | 59s elapsed | eta 59h07m
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "common/WorkProgress.h"
#include "config/Config.h"

namespace mb::train {

// run.progress as the mode of a WorkProgress (an evaluation, a slow step).
WorkProgress::Mode workProgressMode(ProgressKind kind);

class ProgressBar {
 public:
  // Enabled only on rank 0, and for `auto` only when the console is a terminal.
  ProgressBar(ProgressKind kind, bool root);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool enabled() const { return enabled_; }
  void setLoss(double loss) { loss_ = loss; }
  // Appended to the bar where the terminal is wide enough (" | scale 32768": fp16 runs).
  void setNote(std::string note) { note_ = std::move(note); }
  // After each step: the step just finished, the run's last step, the samples of that step, and
  // the learning rate it used.
  void update(std::int64_t step, std::int64_t totalSteps, std::int64_t samples, double lr);
  // A step line was just written (log mode counts the 30 s from here).
  void noteStepLine();
  void finish();  // erases the bar

  // The bar's text for a terminal `columns` wide (exposed for tests).
  static std::string render(std::int64_t step, std::int64_t totalSteps, double loss, double lr,
                            double samplesPerSecond, double secondsLeft, double memoryBytes,
                            int columns);

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_ = false;
  bool lines_ = false;     // log mode on rank 0
  double linesStart_ = 0;  // the progress clock at the first step of this process
  std::int64_t firstStep_ = -1;
  double lastLine_ = 0;
  double loss_ = -1;
  std::string note_;
  Clock::time_point lastDraw_{};
  Clock::time_point rateStart_ = Clock::now();
  std::int64_t rateSamples_ = 0;
  std::int64_t rateSteps_ = 0;
  double samplesPerSecond_ = 0;
  double secondsPerStep_ = 0;
};

}  // namespace mb::train
