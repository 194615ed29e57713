#include "walk/WalkStitch.h"

#include <filesystem>
#include <map>
#include <mutex>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Log.h"
#include "train/checkpoints/DurableFile.h"

namespace mb::walk {
namespace fs = std::filesystem;
namespace {

constexpr ExitCode kCode = ExitCode::kData;

// The attributes of a fold's file the walk's file keeps (they are the same in every fold's).
const char* const kTextAttributes[] = {"time_unit", "model", "task", "layout", "targets_dataset"};
const char* const kIntAttributes[] = {"horizon"};

struct FoldFile {
  std::map<std::string, at::Tensor> datasets;
  std::map<std::string, std::string> texts;
  std::map<std::string, std::int64_t> ints;
};

// Every dataset and the attributes of a predictions file.
FoldFile readPredictionsFile(const std::string& path) {
  FoldFile out;
  h5::Handle file = h5::openFile(path, false, kCode);
  for (const std::string& name : h5::listGroup(file.get()))
    if (h5::isDataset(file.get(), name))
      out.datasets[name] = h5::readTensor(file.get(), name, kCode);
  for (const char* name : kTextAttributes)
    if (h5::hasAttribute(file.get(), name))
      out.texts[name] = h5::readStringAttribute(file.get(), name, kCode);
  for (const char* name : kIntAttributes)
    if (h5::hasAttribute(file.get(), name))
      out.ints[name] = h5::readIntAttribute(file.get(), name, kCode);
  return out;
}

FoldFile readFoldFile(const Fold& fold) {
  const std::string path = (fs::path(fold.dir) / "predictions.h5").string();
  FoldFile out = readPredictionsFile(path);
  const auto rows =
      out.datasets.count("sample_index") ? out.datasets["sample_index"] : at::Tensor();
  const bool holdsItsSamples =
      rows.defined() && rows.numel() == fold.predicted.size() &&
      (rows.numel() == 0 || (rows[0].item<std::int64_t>() == fold.predicted.begin &&
                             rows[-1].item<std::int64_t>() == fold.predicted.end - 1));
  if (!holdsItsSamples)
    throw DataError(path + " does not hold the samples of fold " + fold.plan.name + "'s periods " +
                        "(" + std::to_string(fold.predicted.size()) + " samples from " +
                        std::to_string(fold.predicted.begin) + ")",
                    "delete " + (fs::path(fold.dir) / "fold.json").string() +
                        " and run the walk again: it predicts the fold again with its checkpoint");
  return out;
}

// Writes `datasets` and the attributes to `path` atomically.
void writePredictionsFile(const std::string& path,
                          const std::map<std::string, std::vector<at::Tensor>>& datasets,
                          const FoldFile& attributes,
                          const std::map<std::string, std::string>& moreTexts) {
  const std::string tmp = path + ".tmp";
  {
    h5::Handle file = h5::createFile(tmp, false, ExitCode::kFailure);
    h5::WriteOptions options;
    options.gzipLevel = 4;
    for (const auto& [name, tensors] : datasets)
      h5::writeTensor(file.get(), name, at::cat(tensors), options, ExitCode::kFailure);
    for (const auto& [name, value] : attributes.texts)
      h5::writeAttribute(file.get(), name, value, ExitCode::kFailure);
    for (const auto& [name, value] : attributes.ints)
      h5::writeAttribute(file.get(), name, value, ExitCode::kFailure);
    for (const auto& [name, value] : moreTexts)
      h5::writeAttribute(file.get(), name, value, ExitCode::kFailure);
    file.close(ExitCode::kFailure, tmp);
  }
  train::commitFile(tmp, path);
}

std::string lines(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items)
    text += (text.empty() ? "" : "\n") + item;
  return text;
}

}  // namespace

std::string walkPredictionsPath(const Config& config) {
  return (fs::path(config.run.dir) / "predictions.h5").string();
}

void stitchPredictions(const Config& config, const std::vector<Fold>& folds) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  std::map<std::string, std::vector<at::Tensor>> parts;
  std::vector<at::Tensor> foldOfRow;
  std::vector<std::string> names, periods, checkpoints;
  FoldFile first;
  for (const Fold& fold : folds) {
    if (fold.predicted.size() == 0 || !fold.record) continue;
    FoldFile file = readFoldFile(fold);
    for (auto& [name, tensor] : file.datasets)
      parts[name].push_back(tensor);
    foldOfRow.push_back(
        at::full({fold.predicted.size()}, static_cast<std::int64_t>(names.size()), at::kLong));
    names.push_back(fold.plan.name);
    periods.push_back(fold.plan.predictFrom + " " + fold.plan.predictTo);
    checkpoints.push_back(fold.record->checkpoint);
    if (names.size() == 1) first = std::move(file);
  }
  if (names.empty())
    throw DataError("no fold of the walk has a sample to predict in [" + config.walk.from + ", " +
                        (config.walk.to.empty() ? "the file's end" : config.walk.to) + ")",
                    "check walk.from, walk.to and the file's timestamps (megabatch inspect)");
  parts["fold"] = foldOfRow;
  const std::string path = walkPredictionsPath(config);
  writePredictionsFile(path, parts, first,
                       {{"data", config.data.path},
                        {"split", "walk"},
                        {"every", config.walk.every},
                        {"from", config.walk.from},
                        {"to", folds.back().plan.predictTo},
                        {"fold_names", lines(names)},
                        {"fold_periods", lines(periods)},
                        {"fold_checkpoints", lines(checkpoints)}});
  std::int64_t rows = 0;
  for (const auto& part : foldOfRow)
    rows += part.numel();
  log::get("train").info("walk: wrote {} predictions of {} fold(s) to {}", rows, names.size(),
                         path);
}

void appendPredictions(const std::string& path, const std::string& more) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  const FoldFile before = readPredictionsFile(path);
  const FoldFile after = readPredictionsFile(more);
  std::map<std::string, std::vector<at::Tensor>> datasets;
  for (const auto& [name, tensor] : before.datasets) {
    auto added = after.datasets.find(name);
    if (added == after.datasets.end())
      throw DataError(more + " lacks /" + name + ", which " + path + " holds",
                      "delete the fold's fold.json and run the walk again");
    datasets[name] = {tensor, added->second};
  }
  h5::Handle file = h5::openFile(path, false, kCode);
  std::map<std::string, std::string> kept;
  for (const char* name : {"checkpoint", "data", "split", "from", "to", "model"})
    if (h5::hasAttribute(file.get(), name))
      kept[name] = h5::readStringAttribute(file.get(), name, kCode);
  file.reset();
  writePredictionsFile(path, datasets, before, kept);
  fs::remove(more);
}

}  // namespace mb::walk
