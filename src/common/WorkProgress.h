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
#include <mutex>
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
    // Nothing is shown for work that ends within quietSeconds (0: the start line comes at once).
    double quietSeconds = kQuietSeconds;
    // Log mode: when the first item has not finished after this long, a line says that it is
    // still running (0: never). Time drives it, not update(): a slow first batch is not silent.
    double firstItemSeconds = 10;
    std::string firstItem = "batch";  // what that line calls the first piece of work
    // Log mode: the start line ends with the progress so far ("... : 30% (12/40 micro-batches)
    // | ..."), for work whose start line comes late (a training step that runs long).
    bool startLineShowsProgress = false;
  };

  explicit WorkProgress(Options options);
  ~WorkProgress();
  WorkProgress(const WorkProgress&) = delete;
  WorkProgress& operator=(const WorkProgress&) = delete;

  // `done` so far (of options.total): redraws the bar or writes the lines that are due.
  void update(std::int64_t done);
  void advance(std::int64_t amount);
  // Erases the bar (putting back the status line it covered) or writes the done line ("stopped
  // after ..." when less than options.total was done).
  void finish();

  std::int64_t done() const;

  // Seconds of the progress clock: the steady clock times MEGABATCH_PROGRESS_CLOCK_SCALE (a test
  // hook: 20 makes 30 s of progress pass in 1.5 s; 1 when unset).
  static double clockSeconds();
  // Seconds between log-mode lines, and the work that stays quiet.
  static constexpr double kLineSeconds = 30;
  static constexpr double kQuietSeconds = 2;
  // Real seconds between the ticker's looks at running work (Note [Work progress]).
  static constexpr double kTickSeconds = 0.25;

  // "15% (4096/27545 samples) | 148 samples/s | 30s elapsed | eta 2m37s" (exposed for tests).
  std::string describe(std::int64_t done, double elapsed) const;

 private:
  friend class ProgressTicker;
  std::string amount(double value) const;
  std::string rate(double perSecond) const;
  void writeLine(const std::string& text);
  // What is due at the progress clock's `now`; callers hold mutex_.
  void show(double now);
  void drawBar(double now);
  // Called by the ticker thread: what time alone makes due.
  void tick();

  mutable std::mutex mutex_;  // update() and the ticker thread
  bool ticking_ = false;      // registered with the ticker
  bool firstItemSaid_ = false;
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
