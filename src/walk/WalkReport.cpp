#include "walk/WalkReport.h"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "common/Log.h"
#include "train/checkpoints/DurableFile.h"
#include "train/judge/PredictionsFile.h"
#include "train/watch/Metrics.h"
#include "walk/WalkStitch.h"

namespace mb::walk {
namespace fs = std::filesystem;
namespace {

// The folds with rows in RUN/predictions.h5, in its /fold order (WalkStitch.h).
std::vector<const Fold*> foldsWithRows(const std::vector<Fold>& folds) {
  std::vector<const Fold*> out;
  for (const Fold& fold : folds)
    if (fold.predicted.size() > 0 && fold.record) out.push_back(&fold);
  return out;
}

std::string object(const std::map<std::string, double>& values) {
  train::JsonRecord record;
  for (const auto& [name, value] : values)
    record.add(name, value);
  return record.str();
}

std::string array(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items)
    text += (text.empty() ? "" : ",\n  ") + item;
  return "[\n  " + text + "\n]";
}

// Per fold: its splits as times, its steps, and where its wall time went.
std::string timesTable(const std::vector<const Fold*>& folds) {
  std::string text = fmt::format("  {:<11} {:>7} {:>9} {:>11} {:>11} {:>9} {:>9} {:>12}  {}\n",
                                 "fold", "steps", "training", "evaluation", "prediction",
                                 "overhead", "wall", "rss MiB peak", "train | val");
  constexpr double kMiB = 1024.0 * 1024.0;
  for (const Fold* fold : folds) {
    const FoldRecord& r = *fold->record;
    text += fmt::format(
        "  {:<11} {:>7} {:>8.1f}s {:>10.1f}s {:>10.1f}s {:>8.1f}s {:>8.1f}s {:>5.0f} {:>6.0f}  {} "
        "| "
        "{}\n",
        r.name, r.step, r.trainSeconds, r.evalSeconds, r.predictSeconds, r.overheadSeconds(),
        r.wallSeconds, static_cast<double>(r.rssBytes) / kMiB,
        static_cast<double>(r.peakRssBytes) / kMiB, r.train, r.val);
  }
  return text;
}

}  // namespace

void reportWalk(const Config& config, const std::vector<Fold>& folds,
                const std::vector<std::string>& acceptedChanges) {
  const train::PredictionsFile file = train::readPredictionsFile(walkPredictionsPath(config));
  const std::map<std::string, double> judged = train::judgePredictions(file);
  const std::vector<train::PeriodRow> byFold = train::resultsByFold(file);
  const std::vector<const Fold*> withRows = foldsWithRows(folds);
  std::printf(
      "walk %s: every %s from %s, %zu fold(s); every out-of-sample prediction together:\n%s"
      "  by fold:\n%s  where the time went:\n%s",
      config.run.dir.c_str(), config.walk.every.c_str(), config.walk.from.c_str(), withRows.size(),
      train::judgementText(file, judged).c_str(), train::foldTableText(file, byFold).c_str(),
      timesTable(withRows).c_str());
  std::fflush(stdout);

  std::vector<std::string> foldObjects;
  for (std::size_t i = 0; i < withRows.size(); ++i) {
    std::string record = withRows[i]->record->json();
    const std::string metrics = i < byFold.size() ? object(byFold[i].values) : "{}";
    record.insert(record.size() - 1, ", \"metrics\": " + metrics);
    foldObjects.push_back(record);
  }
  std::vector<std::string> changes, missing;
  for (const auto& change : acceptedChanges) {
    train::JsonRecord record;
    changes.push_back(record.add("change", change).str());
  }
  for (const auto& line : file.missing) {
    train::JsonRecord record;
    missing.push_back(record.add("left_out", line).str());
  }
  train::JsonRecord walk;
  walk.add("run_dir", config.run.dir).add("data", config.data.path).add("every", config.walk.every);
  walk.add("from", config.walk.from).add("predictions", walkPredictionsPath(config));
  std::string json = walk.str();
  json.insert(json.size() - 1, ",\n\"metrics\": " + object(judged) +
                                   ",\n\"folds\": " + array(foldObjects) +
                                   ",\n\"baselines_left_out\": " + array(missing) +
                                   ",\n\"accepted_changes\": " + array(changes));
  const std::string path = (fs::path(config.run.dir) / "walk.json").string();
  train::writeFileAtomically(path, json + "\n");
  log::get("train").info("walk: the report is in {}", path);
}

}  // namespace mb::walk
