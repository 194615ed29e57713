#pragma once
// Progress of one piece of long work (an evaluation, a prediction, a data tool, a load), shown
// the way a person expects it (Note [Work progress] in WorkProgress.cpp):
//   on a terminal, a bar redrawn in place at the bottom of the console:
//     eval val [######--------------] 31% 8448/27545 samples | 148 samples/s | eta 2m09s
//   in log mode (stderr is a file or a pipe), plain lines, never a carriage return:
//     eval val at step 2: 27545 samples, batches of 256                      (the start line)
//     eval val: 27545 samples will take about 3m06s at 148 samples/s; bound it with ...
//     eval val: 15% (4096/27545 samples) | 148 samples/s | 30s elapsed | eta 2m37s
//     eval val: done, 27545 samples in 3m05s (148 samples/s)
// Work that ends within kQuietSeconds prints nothing. Only the rank that speaks (the one with the
// most work, which finishes last) shows anything; the others stay quiet.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace mb {

class WorkProgress {
 public:
  enum class Mode { kAuto, kBar, kLines, kQuiet };
  // How the amount of work is counted: items (samples, steps, graphs) or bytes.
  enum class Unit { kItems, kBytes };

  struct Options {
    std::string label;             // "eval val", "data text"
    std::string unit = "samples";  // the items' name ("samples", "steps"); ignored for kBytes
    Unit counting = Unit::kItems;
    std::int64_t total = 0;
    std::string startLine;  // the log-mode start line; default "<label>: <total> <unit>"
    bool speaks = true;     // false: this rank stays quiet
    Mode mode = Mode::kAuto;
    std::string tag = "app";  // the logger's subsystem tag
    // Log mode: after the first measured stretch, when the whole work will take longer than
    // estimateOverSeconds, one line says how long, followed by hint(rate) (e.g. how to bound it).
    double estimateOverSeconds = 60;
    std::function<std::string(double rate)> hint;
  };

  explicit WorkProgress(Options options);
  ~WorkProgress();
  WorkProgress(const WorkProgress&) = delete;
  WorkProgress& operator=(const WorkProgress&) = delete;

  // `done` so far (of options.total): redraws the bar or writes the lines that are due.
  void update(std::int64_t done);
  void advance(std::int64_t amount) { update(done_ + amount); }
  // Erases the bar (putting back the status line it covered) or writes the done line.
  void finish();

  std::int64_t done() const { return done_; }

  // Seconds of the progress clock: the steady clock times MEGABATCH_PROGRESS_CLOCK_SCALE (a test
  // hook: 20 makes 30 s of progress pass in 1.5 s; 1 when unset).
  static double clockSeconds();
  // Seconds between log-mode lines, and the work that stays quiet.
  static constexpr double kLineSeconds = 30;
  static constexpr double kQuietSeconds = 2;

  // "15% (4096/27545 samples) | 148 samples/s | 30s elapsed | eta 2m37s" (exposed for tests).
  std::string describe(std::int64_t done, double elapsed) const;

 private:
  std::string amount(double value) const;
  std::string rate(double perSecond) const;
  void writeLine(const std::string& text);

  Options options_;
  bool bar_ = false;
  bool lines_ = false;
  bool started_ = false;  // the start line (or the first bar) has been shown
  bool finished_ = false;
  bool estimated_ = false;
  std::string covered_;  // the status line the bar replaced (e.g. the training bar)
  std::int64_t done_ = 0;
  double start_ = 0;
  double lastLine_ = 0;
  double lastDraw_ = -1;
};

}  // namespace mb
