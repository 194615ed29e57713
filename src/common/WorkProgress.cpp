#include "common/WorkProgress.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "common/Environment.h"
#include "common/Log.h"
#include "common/LogStatus.h"
#include "common/Strings.h"

namespace mb {
namespace {

// Note [Work progress]
// Anything that can take more than a few seconds shows that it is alive, so that nobody kills a
// run that looks hung (an evaluation of 27,545 samples on the CPU took 8 minutes without a line).
// - A terminal gets a bar, redrawn at most kDrawSeconds apart with "\r\x1b[K" through
//   log::setStatusLine (log lines go above it). When the work ends the bar is erased and the
//   status line it covered (the training bar) is put back.
// - A log (not a terminal) gets lines a person reads later or tails: a start line once the work
//   has run for kQuietSeconds (what, how many), then one at least every kLineSeconds with the
//   share done, the rate, the time elapsed and the time left, and a done line. No carriage
//   returns. Work that ends within kQuietSeconds writes nothing: short evaluations stay as quiet
//   as before.
// - One rank speaks: the caller passes speaks = true on the rank with the most work (it finishes
//   last, so its ETA is the job's); its lines go through log::speaker, which logs on any rank.
// - The clock is scaled by MEGABATCH_PROGRESS_CLOCK_SCALE, so tests see 30 s pass in 1.5 s.
// - Time drives the output, not only update(): one ticker thread for the process looks at the
//   running work every kTickSeconds, so the start line comes after quietSeconds even while the
//   first batch still runs, a first item slower than firstItemSeconds gets a line saying so, and
//   the periodic lines keep coming between slow batches (an evaluation of bf16
//   batches on a CPU printed nothing for 104 s). Work that does not speak never registers.
constexpr double kDrawSeconds = 0.2;

double steadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double clockScale() {
  static const double scale = [] {
    auto text = env::get("MEGABATCH_PROGRESS_CLOCK_SCALE");
    if (!text) return 1.0;
    try {
      double value = std::stod(*text);
      return value > 0 ? value : 1.0;
    } catch (const std::exception&) {
      return 1.0;
    }
  }();
  return scale;
}

}  // namespace

// One thread ticks every speaking WorkProgress (Note [Work progress]). Leaked on purpose, like
// the watchdog: work may end in static destructors.
class ProgressTicker {
 public:
  static ProgressTicker& instance() {
    static ProgressTicker* ticker = new ProgressTicker();
    return *ticker;
  }
  void add(WorkProgress* work) {
    std::lock_guard<std::mutex> lock(mutex_);
    running_.insert(work);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  // After remove() returns, the ticker does not touch `work` again.
  void remove(WorkProgress* work) {
    std::lock_guard<std::mutex> lock(mutex_);
    running_.erase(work);
  }

 private:
  [[noreturn]] void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait_for(lock, std::chrono::duration<double>(WorkProgress::kTickSeconds));
      for (WorkProgress* work : running_)
        work->tick();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::set<WorkProgress*> running_;
  std::thread thread_;
};

double WorkProgress::clockSeconds() {
  return steadySeconds() * clockScale();
}

WorkProgress::WorkProgress(Options options) : options_(std::move(options)) {
  const bool terminal = log::consoleIsTerminal();
  if (options_.speaks) {
    switch (options_.mode) {
      case Mode::kAuto:
        bar_ = terminal;
        lines_ = !terminal;
        break;
      case Mode::kBar:
        bar_ = true;
        break;
      case Mode::kLines:
        lines_ = true;
        break;
      case Mode::kQuiet:
        break;
    }
  }
  if (options_.startLine.empty())
    options_.startLine = options_.label + ": " + amount(static_cast<double>(options_.total));
  start_ = clockSeconds();
  lastLine_ = start_;
  if (bar_ || lines_) {
    if (options_.quietSeconds <= 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      show(start_);
    }
    ticking_ = true;
    ProgressTicker::instance().add(this);
  }
}

WorkProgress::~WorkProgress() {
  if (ticking_) ProgressTicker::instance().remove(this);
  // Unwinding (an error): erase the bar, but claim no "done".
  if (bar_ && started_ && !finished_) log::setStatusLine(covered_);
}

std::string WorkProgress::amount(double value) const {
  if (options_.counting == Unit::kBytes) return str::humanBytes(value);
  return fmt::format("{:.0f} {}", value, options_.unit);
}

std::string WorkProgress::rate(double perSecond) const {
  if (options_.counting == Unit::kBytes) return str::humanBytes(perSecond) + "/s";
  if (perSecond >= 100) return fmt::format("{:.0f} {}/s", perSecond, options_.unit);
  return fmt::format("{:.3g} {}/s", perSecond, options_.unit);
}

std::string WorkProgress::describe(std::int64_t done, double elapsed) const {
  const double total = static_cast<double>(std::max<std::int64_t>(options_.total, 1));
  const double share = std::clamp(static_cast<double>(done) / total, 0.0, 1.0);
  const double perSecond = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  const double left = perSecond > 0 ? (total - static_cast<double>(done)) / perSecond : NAN;
  std::string counts = options_.counting == Unit::kBytes
                           ? fmt::format("{}/{}", str::humanBytes(static_cast<double>(done)),
                                         str::humanBytes(static_cast<double>(options_.total)))
                           : fmt::format("{}/{} {}", done, options_.total, options_.unit);
  return fmt::format("{:.0f}% ({}) | {} | {} elapsed | eta {}", std::floor(100 * share), counts,
                     rate(perSecond), str::humanDuration(elapsed), str::humanDuration(left));
}

void WorkProgress::writeLine(const std::string& text) {
  log::speaker(options_.tag).info("{}", text);
}

std::int64_t WorkProgress::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void WorkProgress::advance(std::int64_t amount) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ += amount;
  if (!finished_ && (bar_ || lines_)) show(clockSeconds());
}

void WorkProgress::update(std::int64_t done) {
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = done;
  if (!finished_ && (bar_ || lines_)) show(clockSeconds());
}

void WorkProgress::tick() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  const double now = clockSeconds();
  show(now);
  const double elapsed = now - start_;
  if (lines_ && started_ && done_ == 0 && !firstItemSaid_ && options_.firstItemSeconds > 0 &&
      elapsed >= options_.firstItemSeconds) {
    firstItemSaid_ = true;
    writeLine(fmt::format("{}: the first {} is still running after {}", options_.label,
                          options_.firstItem, str::humanDuration(elapsed)));
  }
}

void WorkProgress::drawBar(double now) {
  const double elapsed = now - start_;
  const double real = steadySeconds();
  if (lastDraw_ >= 0 && real - lastDraw_ < kDrawSeconds) return;
  if (!started_ && elapsed < options_.quietSeconds) return;
  if (!started_) covered_ = log::statusLine();
  started_ = true;
  lastDraw_ = real;
  const double total = static_cast<double>(std::max<std::int64_t>(options_.total, 1));
  const double share = std::clamp(static_cast<double>(done_) / total, 0.0, 1.0);
  const int cells = 20;
  const int filled = static_cast<int>(share * cells + 0.5);
  const double perSecond = elapsed > 0 ? static_cast<double>(done_) / elapsed : 0.0;
  const double left = perSecond > 0 ? (total - static_cast<double>(done_)) / perSecond : NAN;
  std::string text = fmt::format(
      "{} [{}{}] {:.0f}% {}/{} | {} | eta {}", options_.label, std::string(filled, '#'),
      std::string(cells - filled, '-'), std::floor(100 * share),
      options_.counting == Unit::kBytes ? str::humanBytes(static_cast<double>(done_))
                                        : std::to_string(done_),
      amount(static_cast<double>(options_.total)), rate(perSecond), str::humanDuration(left));
  const auto columns = static_cast<std::size_t>(std::max(log::consoleColumns() - 1, 10));
  if (text.size() > columns) text.resize(columns);
  log::setStatusLine(text);
}

void WorkProgress::show(double now) {
  if (bar_) {
    drawBar(now);
    return;
  }
  const double elapsed = now - start_;
  if (!started_) {
    if (elapsed < options_.quietSeconds) return;
    started_ = true;
    writeLine(options_.startLineShowsProgress ? options_.startLine + ": " + describe(done_, elapsed)
                                              : options_.startLine);
    lastLine_ = now;
  }
  if (!estimated_ && done_ > 0) {
    estimated_ = true;
    const double perSecond = static_cast<double>(done_) / std::max(elapsed, 1e-9);
    const double whole = static_cast<double>(options_.total) / perSecond;
    if (whole > options_.estimateOverSeconds)
      writeLine(fmt::format("{}: {} will take about {} at {}{}", options_.label,
                            amount(static_cast<double>(options_.total)), str::humanDuration(whole),
                            rate(perSecond),
                            options_.hint ? options_.hint(perSecond) : std::string()));
  }
  if (now - lastLine_ >= kLineSeconds) {
    lastLine_ = now;
    writeLine(options_.label + ": " + describe(done_, elapsed));
  }
}

void WorkProgress::finish() {
  if (ticking_) {
    ProgressTicker::instance().remove(this);  // before mutex_: the ticker takes it under its own
    ticking_ = false;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  finished_ = true;
  if (!started_) return;
  if (bar_) {
    log::setStatusLine(covered_);
    return;
  }
  if (lines_ && options_.total > 0 && done_ < options_.total) {  // left early (a stop request)
    writeLine(fmt::format("{}: stopped after {} of {} in {}", options_.label,
                          amount(static_cast<double>(done_)), options_.total,
                          str::humanDuration(clockSeconds() - start_)));
    return;
  }
  if (lines_) {
    const double elapsed = clockSeconds() - start_;
    writeLine(fmt::format("{}: done, {} in {} ({})", options_.label,
                          amount(static_cast<double>(done_)), str::humanDuration(elapsed),
                          rate(static_cast<double>(done_) / std::max(elapsed, 1e-9))));
  }
}

}  // namespace mb
