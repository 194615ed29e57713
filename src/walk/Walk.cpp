#include "walk/Walk.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>

#include <ATen/Functions.h>
#include <fmt/format.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "common/TimeText.h"
#include "config/ConfigKinds.h"
#include "config/ConfigLoader.h"
#include "data/pipeline/RowCache.h"
#include "data/pipeline/SplitPreview.h"
#include "dist/Agreement.h"
#include "dist/Runtime.h"
#include "train/CheckpointModel.h"
#include "train/Prediction.h"
#include "train/Signals.h"
#include "train/Trainer.h"
#include "train/checkpoints/RunLock.h"
#include "train/watch/Metrics.h"
#include "walk/FoldRecord.h"
#include "walk/WalkChecks.h"
#include "walk/WalkPlan.h"
#include "walk/WalkReport.h"
#include "walk/WalkStitch.h"

namespace mb::walk {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string durationText(double seconds) {
  if (seconds < 9.95) return fmt::format("{:.1f}s", std::max(0.0, seconds));  // a fold's overhead
  const auto s = static_cast<std::int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}h{:02d}m", s / 3600, s / 60 % 60);
}

spdlog::logger& walkLog() {
  return log::get("train");
}

// Note [Walk-forward]: folds need samples in time order.
void requireTime(const Config& config) {
  const LayoutRules* layout = findLayoutRules(config.data.layout);
  if (layout != nullptr && layout->hasTime) return;
  throw ConfigError("megabatch walk needs samples in time order, and data.layout = " +
                        config.data.layout + " has no time",
                    "walk a series, samples or panel file (docs/data-format.md); train a " +
                        config.data.layout + " model with megabatch train");
}

class WalkRun {
 public:
  WalkRun(const Config& config, dist::Runtime& runtime) : config_(config), runtime_(runtime) {}

  int run(const WalkOptions& options) {
    requireTime(config_);
    if (!options.fold.empty()) return runOneFold(options.fold);
    if (options.planOnly) {
      dist::agreed(control(), "planning the walk's folds", [&] { plan(); });
      if (isRoot()) printPlan();
      return 0;
    }
    // A walk that cannot be cut into folds writes nothing, not even its run directory.
    dist::agreed(control(), "planning the walk's folds", [&] { plan(); });
    lockRunDirectory();
    if (isRoot()) logPlan();
    dist::agreed(control(), "checking the folds done before", [&] { checkFoldsDone(); });
    checkDataOfFoldsDone(config_, foldConfig(lastFoldWithSamples()), folds_, runtime_,
                         dataChanges_);
    const data::RowCache::Scope keptRows(config_.data.path);  // Note [Rows kept between loads]
    const Clock::time_point start = Clock::now();
    std::int64_t ranHere = 0;
    for (std::size_t i = 0; i < folds_.size(); ++i) {
      if (stopAgreed()) return stopped();
      runFold(i, ranHere, start);
    }
    if (stopAgreed()) return stopped();
    dist::agreed(control(), "stitching the walk's predictions", [&] {
      if (isRoot()) stitchPredictions(config_, folds_);
    });
    dist::agreed(control(), "judging the walk", [&] {
      if (isRoot()) reportWalk(config_, folds_, dataChanges_);
    });
    return 0;
  }

 private:
  // Note [Folds in parallel]: one fold of a job array. The fold's own run lock (its Trainer's)
  // is the only lock: array tasks share RUN, each in its own RUN/folds/<day>. The walk's checks
  // of the folds done before hold as for a whole walk; a warm start needs its fold before.
  int runOneFold(const std::string& name) {
    oneFold_ = true;
    std::size_t i = 0;
    dist::agreed(control(), "planning the walk's folds", [&] {
      plan();
      i = foldNamed(name);
    });
    if (folds_[i].predicted.size() == 0) {
      if (isRoot())
        walkLog().info("fold {}: no sample in [{}, {}): nothing to train or predict", name,
                       folds_[i].plan.predictFrom, folds_[i].plan.predictTo);
      return 0;
    }
    dist::agreed(control(), "checking the folds done before", [&] { checkFoldsDone(); });
    dist::agreed(control(), "checking the fold's warm start", [&] { requireWarmStartDone(i); });
    checkDataOfFoldsDone(config_, foldConfig(lastFoldWithSamples()), folds_, runtime_,
                         dataChanges_);
    std::int64_t ranHere = 0;
    runFold(i, ranHere, Clock::now());
    if (stoppedInFold_) return stopped();
    if (isRoot())
      walkLog().info(
          "fold {} is done; once every fold is, `megabatch walk` with the same config "
          "stitches {}/predictions.h5 and reports",
          name, config_.run.dir);
    return 0;
  }

  std::size_t foldNamed(const std::string& name) const {
    for (std::size_t i = 0; i < folds_.size(); ++i)
      if (folds_[i].plan.name == name) return i;
    std::string names;
    for (const Fold& fold : folds_)
      names += (names.empty() ? "" : ", ") + fold.plan.name;
    throw ConfigError("megabatch walk --fold " + name + ": the walk has no fold of that name",
                      "a fold is named by its first day; this walk's folds: " + names +
                          " (megabatch walk --plan prints them)");
  }

  // With warm starts a fold starts from the weights of the fold before it, which must be done.
  void requireWarmStartDone(std::size_t i) const {
    const std::string& from = folds_[i].initFrom;
    for (const Fold& before : folds_) {
      if (before.dir != from || before.doneRows >= 0) continue;
      throw ConfigError(
          "megabatch walk --fold " + folds_[i].plan.name +
              ": with walk.warm_start: true it "
              "starts from the weights of fold " +
              before.plan.name + ", which is not done",
          "run megabatch walk --fold " + before.plan.name +
              " first, or the whole walk with "
              "megabatch walk; folds run in any order, or side by side, with walk.warm_start: "
              "false");
    }
  }

  bool isRoot() const { return runtime_.rank() == 0; }
  dist::Communicator& control() { return runtime_.control(); }

  void lockRunDirectory() {
    dist::agreed(control(), "taking the walk's run directory", [&] {
      if (!isRoot()) return;
      lock_ = train::RunLock::acquire({config_.run.dir, config_.run.lock, config_.run.lockWaitS,
                                       [] { return train::stopSeen() != 0; }});
      log::addFileSink((fs::path(config_.run.dir) / "walk.log").string());
    });
  }

  void plan() {
    data::SplitPreview preview(config_);
    data::SampleTimes& times = preview.times();
    const data::SampleRange usable = preview.usable();
    if (usable.size() <= 0)
      throw DataError(config_.data.path + " has no usable sample to walk over",
                      "check the file with megabatch inspect");
    const std::string range = times.rangeSentence(usable, "the file's samples");
    range_ = range;
    const std::vector<WalkPeriod> periods =
        walkPeriods(config_.walk, preview.unit(), times.at(usable.end - 1), range);
    for (FoldPlan& plan : planFolds(config_.walk, config_.data.split, preview.unit(), periods)) {
      Fold fold;
      fold.plan = std::move(plan);
      fold.dir = foldDirectory(config_.run.dir, fold.plan.name);
      for (std::size_t p = fold.plan.firstPeriod; p < fold.plan.endPeriod; ++p)
        fold.labels += (fold.labels.empty() ? "" : " ") + periods[p].label;
      fold.predicted = {times.firstAtOrAfter(usable, times.cut("walk", fold.plan.predictFrom)),
                        times.firstAtOrAfter(usable, times.cut("walk", fold.plan.predictTo))};
      if (fold.predicted.size() > 0) fold.splits = splitsOf(preview, fold, range);
      fold.initFrom = initFromOf(fold);
      folds_.push_back(std::move(fold));
    }
    if (folds_.empty())
      throw DataError("the walk has no period to predict from walk.from = " + config_.walk.from,
                      "start the walk inside the file's time range: " + range);
  }

  void logPlan() {
    walkLog().info("walk: {} fold(s), one per {} {}{} from {} to {} ({}); {}", folds_.size(),
                   config_.walk.retrainEvery, config_.walk.every,
                   config_.walk.retrainEvery == 1 ? "" : "s", folds_.front().plan.predictFrom,
                   folds_.back().plan.predictTo, range_, describeProcedure());
    walkLog().info(
        "walk: each fold's data.split is the walk's (val_from, val_until and train_from, with "
        "data.split.embargo = {}): the config's other split keys are replaced",
        config_.data.split.embargo);
  }

  // Note [Walk-forward]: the weights a fold starts from. With warm starts the first fold starts
  // from the config's train.init_from and each later one from the last fold with samples;
  // without, every fold from train.init_from (empty: from scratch).
  std::string initFromOf(const Fold& fold) const {
    if (!config_.walk.warmStart || fold.predicted.size() == 0) return config_.train.initFrom;
    for (auto it = folds_.rbegin(); it != folds_.rend(); ++it)
      if (it->predicted.size() > 0) return it->dir;
    return config_.train.initFrom;
  }

  void printPlan() const {
    for (const Fold& fold : folds_) {
      train::JsonRecord line;
      line.add("fold", fold.plan.name).add("periods", fold.labels);
      line.add("from", fold.plan.predictFrom).add("to", fold.plan.predictTo);
      line.add("train_from", fold.plan.split.trainFrom).add("val_from", fold.plan.split.valFrom);
      line.add("val_until", fold.plan.split.valUntil);
      const auto range = [&](const char* name, const data::SampleRange& r) {
        line.add(std::string(name) + "_begin", r.begin).add(std::string(name) + "_end", r.end);
      };
      range("train", fold.splits[static_cast<int>(data::Split::kTrain)]);
      range("val", fold.splits[static_cast<int>(data::Split::kVal)]);
      range("predict", fold.predicted);
      line.add("init_from", fold.initFrom);
      std::printf("%s\n", line.str().c_str());
    }
  }

  std::string describeProcedure() const {
    const WalkConfig& w = config_.walk;
    std::string text = w.val == 0
                           ? "no val split (each fold predicts with its last checkpoint)"
                           : fmt::format("val: the {} {}(s) before each fold", w.val, w.every);
    text += w.trainWindow == 0
                ? ", train: everything before val"
                : fmt::format(", train: the {} {}(s) before val", w.trainWindow, w.every);
    return text +
           (w.warmStart ? ", each fold from the last one's weights" : ", every fold from scratch");
  }

  // The fold's cuts as the loader will plan them; a fold without train or val samples ends the
  // walk before any training, naming it.
  std::array<data::SampleRange, 3> splitsOf(data::SplitPreview& preview, const Fold& fold,
                                            const std::string& range) {
    try {
      return preview.plan(fold.plan.split);
    } catch (const Error& error) {
      throw DataError(
          "fold " + fold.plan.name + " (predicting " + fold.labels + "): " + error.message(),
          "move walk.from later (the first fold needs train and val samples before "
          "it), or use fewer walk.val periods; " +
              range);
    }
  }

  // Rank 0 reads which folds are done and checks their config; every rank learns the first.
  void checkFoldsDone() {
    at::Tensor rows = at::full({static_cast<std::int64_t>(folds_.size())}, -1, at::kLong);
    if (isRoot()) {
      for (std::size_t i = 0; i < folds_.size(); ++i) {
        folds_[i].record = readFoldRecord(config_.run.dir, folds_[i].plan.name);
        if (folds_[i].record) rows[static_cast<std::int64_t>(i)] = folds_[i].record->rows;
      }
      checkConfigOfFoldsDone(config_, folds_, dataChanges_);
    }
    control().broadcast(rows, 0, "walk: folds done");
    for (std::size_t i = 0; i < folds_.size(); ++i)
      folds_[i].doneRows = rows[static_cast<std::int64_t>(i)].item<std::int64_t>();
  }

  std::size_t lastFoldWithSamples() const {
    for (std::size_t i = folds_.size(); i-- > 0;)
      if (folds_[i].predicted.size() > 0) return i;
    return 0;
  }

  Config foldConfig(std::size_t i) const {
    Config fold = config_;
    const SplitConfig base = config_.data.split;
    fold.data.split = SplitConfig{};
    fold.data.split.trainFrom = folds_[i].plan.split.trainFrom;
    fold.data.split.valFrom = folds_[i].plan.split.valFrom;
    fold.data.split.valUntil = folds_[i].plan.split.valUntil;
    fold.data.split.embargo = base.embargo;
    fold.run.dir = folds_[i].dir;
    fold.run.resume = "auto";
    fold.train.initFrom = folds_[i].initFrom;
    return fold;
  }

  // The checkpoint a fold predicts with: best.h5, or its last one without a val split.
  std::string predictingCheckpoint(const Fold& fold) const {
    if (config_.walk.val == 0) return (fs::path(fold.dir) / "checkpoints" / "latest").string();
    return fold.dir;
  }

  // Trains fold i (unless done) and predicts it. False when it was done already or empty.
  bool runFold(std::size_t i, std::int64_t& ranHere, Clock::time_point walkStart) {
    Fold& fold = folds_[i];
    const std::string where = fmt::format("fold {}/{} {}", i + 1, folds_.size(), fold.labels);
    if (fold.predicted.size() == 0) {
      if (isRoot())
        walkLog().info("{}: no sample in [{}, {}): nothing to train or predict", where,
                       fold.plan.predictFrom, fold.plan.predictTo);
      return false;
    }
    if (fold.doneRows == fold.predicted.size()) return false;
    const Clock::time_point start = Clock::now();
    FoldRecord record;
    record.name = fold.plan.name;
    record.from = fold.plan.predictFrom;
    record.to = fold.plan.predictTo;
    record.periods = fold.labels;
    const bool done = fold.doneRows >= 0;
    if (done) {
      // A fold whose periods gained samples (the file grew inside them): its model, trained on
      // what came before them, predicts the new ones; nothing is trained, and its rows stay.
      if (fold.record) record = *fold.record;  // rank 0
      if (isRoot())
        walkLog().info("{}: {} samples now ({} before): predicting the new ones with {}", where,
                       fold.predicted.size(), record.rows, record.checkpoint);
      predictNewSamples(fold, record);
    } else {
      if (isRoot())
        walkLog().info("{}: training on samples {}, validating on {}, predicting {}", where,
                       describe(fold, data::Split::kTrain), describe(fold, data::Split::kVal),
                       fold.predicted.size());
      train::Trainer trainer(foldConfig(i), runtime_);
      const train::RunOutcome outcome = trainer.run();
      if (isRoot()) log::removeFileSink((fs::path(fold.dir) / "train.log").string());
      if (outcome == train::RunOutcome::kPreempted) {
        stoppedInFold_ = true;
        return true;
      }
      if (outcome == train::RunOutcome::kTooManyBadSteps)
        throw RuntimeError(where + ": training stopped after too many bad steps (" + fold.dir +
                               "/train.log says which)",
                           "lower optim.lr or raise train.grad_clip, then run the walk again");
      const train::RunSummary& summary = trainer.summary();
      record.train = summary.trainSplit;
      record.val = summary.valSplit;
      record.step = summary.step;
      record.stepsRun = summary.stepsRun;
      record.trainSeconds = summary.stepSeconds;
      record.evalSeconds = summary.evalSeconds;
      predict(fold, record);
    }
    record.wallSeconds = (done ? record.wallSeconds : 0) + secondsSince(start);
    record.rssBytes = train::processMemoryBytes();
    record.peakRssBytes = train::processMemoryPeakBytes();
    dist::agreed(control(), "recording " + fold.plan.name, [&] {
      if (isRoot()) writeFoldRecord(config_.run.dir, record);
    });
    fold.record = record;
    fold.doneRows = fold.predicted.size();
    ++ranHere;
    if (isRoot()) {
      const double perFold = secondsSince(walkStart) / static_cast<double>(ranHere);
      const auto left = static_cast<double>(folds_.size() - i - 1);
      walkLog().info(
          "{}: done in {} (training {}, evaluation {}, prediction {}, overhead {}), {} steps, {} "
          "samples predicted, rss {} (peak {}){}",
          where, durationText(record.wallSeconds), durationText(record.trainSeconds),
          durationText(record.evalSeconds), durationText(record.predictSeconds),
          durationText(record.overheadSeconds()), record.step, record.rows,
          str::humanBytes(static_cast<double>(record.rssBytes)),
          str::humanBytes(static_cast<double>(record.peakRssBytes)),
          oneFold_ ? "" : "; walk ETA " + durationText(perFold * left));
    }
    return true;
  }

  std::string describe(const Fold& fold, data::Split split) const {
    const data::SampleRange& r = fold.splits[static_cast<int>(split)];
    return fmt::format("[{}, {})", r.begin, r.end);
  }

  void predict(const Fold& fold, FoldRecord& record) {
    const Clock::time_point start = Clock::now();
    train::PredictRequest request;
    request.checkpoint = predictingCheckpoint(fold);
    request.data = config_.data.path;
    request.out = (fs::path(fold.dir) / "predictions.h5").string();
    request.split = "";
    request.period = {fold.plan.predictFrom, fold.plan.predictTo, ""};
    dist::agreed(control(), "predicting " + fold.plan.name, [&] {
      if (!isRoot()) return;
      record.checkpoint = train::resolveCheckpointPath(request.checkpoint);
      record.rows = train::predictToFile(request, runtime_).rows;
    });
    record.predictSeconds = secondsSince(start);
  }

  // The samples of a done fold's periods after those it predicted, appended to its file.
  void predictNewSamples(const Fold& fold, FoldRecord& record) {
    const Clock::time_point start = Clock::now();
    dist::agreed(control(), "predicting the new samples of " + fold.plan.name, [&] {
      if (!isRoot()) return;
      const std::string more = (fs::path(fold.dir) / "predictions-new.h5").string();
      train::PredictRequest request;
      request.checkpoint = record.checkpoint;
      request.data = config_.data.path;
      request.out = more;
      request.split = "";
      request.period = {timeOfSample(fold.predicted.begin + record.rows), fold.plan.predictTo, ""};
      const std::int64_t added = train::predictToFile(request, runtime_).rows;
      if (record.rows + added != fold.predicted.size())
        throw DataError(config_.data.path + ": the new samples of fold " + fold.plan.name +
                            " share their time with ones it predicted before",
                        "delete " + (fs::path(fold.dir) / "fold.json").string() +
                            " to predict its periods again whole");
      appendPredictions((fs::path(fold.dir) / "predictions.h5").string(), more);
      record.rows += added;
    });
    record.predictSeconds += secondsSince(start);
  }

  // Sample `i`'s time as a cut (rank 0: one row of the file's timestamps).
  std::string timeOfSample(std::int64_t i) const {
    std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
    const std::string& name =
        config_.data.layout == "panel" ? config_.data.names.time : config_.data.names.timestamps;
    h5::Handle file = h5::openFile(config_.data.path, false, ExitCode::kData);
    h5::Handle dataset = h5::openDataset(file.get(), name, ExitCode::kData);
    const at::Tensor time =
        h5::readRows(dataset.get(), i, i + 1, at::kLong, ExitCode::kData, config_.data.path);
    return formatTime(time.item<std::int64_t>(), config_.data.timeUnit);
  }

  bool stopAgreed() {
    if (stoppedInFold_) return true;
    at::Tensor stop = at::full({1}, train::stopSeen(), at::kInt);
    control().allReduce(stop, dist::ReduceOp::kMax, "walk: stop between folds");
    return stop.item<int>() != 0;
  }

  int stopped() {
    if (isRoot())
      walkLog().warn(
          "the walk stopped on a signal: the folds done are kept, and the fold it was training "
          "has a checkpoint; run the same command again to go on");
    return static_cast<int>(ExitCode::kPreempted);
  }

  const Config& config_;
  dist::Runtime& runtime_;
  std::unique_ptr<train::RunLock> lock_;
  std::vector<Fold> folds_;
  std::vector<std::string> dataChanges_;  // accepted under run.allow_data_change
  bool stoppedInFold_ = false;
  bool oneFold_ = false;  // walk --fold
  std::string range_;     // the file's samples in words
};

}  // namespace

int runWalk(const Config& config, dist::Runtime& runtime, const WalkOptions& options) {
  return WalkRun(config, runtime).run(options);
}

}  // namespace mb::walk
