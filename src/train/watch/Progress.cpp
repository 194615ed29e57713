#include "train/watch/Progress.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/Log.h"
#include "common/Strings.h"
#include "common/WorkProgress.h"
#include "train/watch/Metrics.h"

namespace mb::train {

WorkProgress::Mode workProgressMode(ProgressKind kind) {
  switch (kind) {
    case ProgressKind::kBar:
      return WorkProgress::Mode::kBar;
    case ProgressKind::kLines:
      return WorkProgress::Mode::kLines;
    case ProgressKind::kAuto:
      break;
  }
  return WorkProgress::Mode::kAuto;
}

namespace {

// Redraws per second: enough to look alive, few enough not to flood a slow terminal or mpirun.
constexpr double kDrawInterval = 0.2;
// The rate behind samples/s and the ETA is re-measured over windows of this many seconds.
constexpr double kRateWindow = 2.0;

}  // namespace

ProgressBar::ProgressBar(ProgressKind kind, bool root) {
  enabled_ = root && (kind == ProgressKind::kBar ||
                      (kind == ProgressKind::kAuto && log::consoleIsTerminal()));
  lines_ = root && !enabled_;
  linesStart_ = WorkProgress::clockSeconds();
  lastLine_ = linesStart_;
}

void ProgressBar::noteStepLine() {
  lastLine_ = WorkProgress::clockSeconds();
}

ProgressBar::~ProgressBar() {
  finish();
}

void ProgressBar::update(std::int64_t step, std::int64_t totalSteps, std::int64_t samples,
                         double lr) {
  if (lines_) {
    const double now = WorkProgress::clockSeconds();
    if (firstStep_ < 0) firstStep_ = step - 1;  // a resumed run counts from its first step
    if (now - lastLine_ >= WorkProgress::kLineSeconds) {
      lastLine_ = now;
      const double elapsed = now - linesStart_;
      const double perSecond = static_cast<double>(step - firstStep_) / std::max(elapsed, 1e-9);
      const double left = static_cast<double>(totalSteps - step) / std::max(perSecond, 1e-12);
      const double share =
          totalSteps > 0 ? std::floor(100.0 * static_cast<double>(step) / totalSteps) : 0.0;
      log::get("train").info("train: {:.0f}% ({}/{} steps) | {:.3g} steps/s | {} elapsed | eta {}",
                             share, step, totalSteps, perSecond, str::humanDuration(elapsed),
                             str::humanDuration(left));
    }
  }
  if (!enabled_) return;
  const auto now = Clock::now();
  rateSamples_ += samples;
  rateSteps_ += 1;
  const double window = std::chrono::duration<double>(now - rateStart_).count();
  if (window >= kRateWindow || secondsPerStep_ == 0) {
    samplesPerSecond_ = static_cast<double>(rateSamples_) / std::max(window, 1e-9);
    secondsPerStep_ = window / static_cast<double>(rateSteps_);
    if (window >= kRateWindow) {
      rateStart_ = now;
      rateSamples_ = 0;
      rateSteps_ = 0;
    }
  }
  if (step < totalSteps && std::chrono::duration<double>(now - lastDraw_).count() < kDrawInterval)
    return;
  lastDraw_ = now;
  const double left = static_cast<double>(totalSteps - step) * secondsPerStep_;
  const int columns = log::consoleColumns();
  std::string text = render(step, totalSteps, loss_, lr, samplesPerSecond_, left,
                            static_cast<double>(processMemoryBytes()), columns);
  if (text.size() + note_.size() <= static_cast<std::size_t>(columns)) text += note_;
  log::setStatusLine(text);
}

void ProgressBar::finish() {
  if (enabled_) log::setStatusLine("");
}

std::string ProgressBar::render(std::int64_t step, std::int64_t totalSteps, double loss, double lr,
                                double samplesPerSecond, double secondsLeft, double memoryBytes,
                                int columns) {
  const double fraction =
      totalSteps > 0 ? std::clamp(static_cast<double>(step) / totalSteps, 0.0, 1.0) : 0.0;
  const std::string head = fmt::format("step {}/{} ", step, totalSteps);
  const std::string tail =
      fmt::format(" {:3.0f}% | loss {} | lr {:.3g} | {:.0f} samples/s | eta {} | rss {}",
                  100 * fraction, loss >= 0 ? fmt::format("{:.5g}", loss) : std::string("-"), lr,
                  samplesPerSecond, str::humanDuration(secondsLeft), str::humanBytes(memoryBytes));
  // The bar takes what the numbers leave of the line, between 10 and 30 cells.
  const int room = columns - 1 - static_cast<int>(head.size() + tail.size()) - 2;
  std::string line = head;
  if (room >= 10) {
    const int cells = std::min(room, 30);
    const int done = static_cast<int>(fraction * cells + 0.5);
    line += "[" + std::string(done, '#') + std::string(cells - done, '-') + "]";
  }
  line += tail;
  if (static_cast<int>(line.size()) > columns - 1) line.resize(std::max(columns - 1, 0));
  return line;
}

}  // namespace mb::train
