#include "walk/WalkChecks.h"

#include <algorithm>
#include <filesystem>
#include <mutex>

#include <ATen/Functions.h>
#include <fstream>
#include <sstream>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "config/ConfigLoader.h"
#include "data/pipeline/DataIdentity.h"
#include "dist/Agreement.h"
#include "dist/Communicator.h"
#include "dist/Runtime.h"
#include "train/checkpoints/CheckpointDirectory.h"

namespace mb::walk {
namespace fs = std::filesystem;
namespace {

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The folds named in a message: "2019-04-01, 2019-05-01 and 3 more".
std::string foldNames(const std::vector<std::string>& names) {
  constexpr std::size_t kShown = 4;
  std::vector<std::string> shown(names.begin(),
                                 names.begin() + static_cast<long>(std::min(kShown, names.size())));
  std::string text = str::join(shown, ", ");
  if (names.size() > kShown) text += " and " + std::to_string(names.size() - kShown) + " more";
  return text;
}

// A change of what done folds trained with: refused, or with run.allow_data_change accepted and
// recorded.
void settle(const Config& config, const std::string& what, const std::vector<std::string>& folds,
            std::vector<std::string>& accepted) {
  if (folds.empty()) return;
  const std::string message =
      what + " (fold(s) " + foldNames(folds) + " of " + config.run.dir + ")";
  if (config.run.allowDataChange) {
    log::get("train").warn(
        "walk: {}; going on: run.allow_data_change = true (recorded in "
        "walk.json)",
        message);
    accepted.push_back(message);
    return;
  }
  throw DataError(message + "; nothing was trained",
                  "walk into a new run.dir to judge the procedure as it is now; or put back the "
                  "config and the data the folds trained on; or go on anyway with "
                  "run.allow_data_change=true (recorded in walk.json)");
}

// The data identity a fold's newest checkpoint recorded ("" for a fold without one).
std::string identityOfFold(const Fold& fold) {
  const std::string checkpoints = (fs::path(fold.dir) / "checkpoints").string();
  const std::string newest = train::readLatestName(checkpoints);
  if (newest.empty()) return "";
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  const std::string path = (fs::path(checkpoints) / newest).string();
  h5::Handle file = h5::openFile(path, false, ExitCode::kCheckpoint);
  h5::Handle meta = h5::openGroup(file.get(), "meta", ExitCode::kCheckpoint);
  if (!h5::hasAttribute(meta.get(), "data_identity")) return "";
  return h5::readStringAttribute(meta.get(), "data_identity", ExitCode::kCheckpoint);
}

}  // namespace

void checkConfigOfFoldsDone(const Config& config, const std::vector<Fold>& folds,
                            std::vector<std::string>& accepted) {
  std::vector<std::string> changedFolds;
  std::vector<std::string> keys;
  Config now = config;
  for (const Fold& fold : folds) {
    if (!fold.record) continue;
    const std::string path = (fs::path(fold.dir) / "config.yaml").string();
    if (!fs::exists(path)) continue;
    const Config trained = parseConfig(readText(path), path);
    now.data.split = trained.data.split;  // the walk's own cuts: not the user's to change
    now.run = trained.run;
    now.train.initFrom = trained.train.initFrom;
    const std::vector<std::string> changed = changedKeys(now, trained);
    if (changed.empty()) continue;
    changedFolds.push_back(fold.plan.name);
    for (const auto& key : changed)
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  settle(config,
         "the config differs from what the done folds trained with: " + str::join(keys, ", "),
         changedFolds, accepted);
}

void checkDataOfFoldsDone(const Config& config, const Config& identifyWith,
                          const std::vector<Fold>& folds, dist::Runtime& runtime,
                          std::vector<std::string>& accepted) {
  dist::Communicator& comm = runtime.control();
  std::vector<std::pair<std::string, std::string>> trainedOn;  // rank 0: fold, its identity
  at::Tensor any = at::zeros({1}, at::kLong);
  dist::agreed(comm, "reading what the folds trained on", [&] {
    if (comm.rank() != 0) return;
    for (const Fold& fold : folds) {
      const std::string identity = identityOfFold(fold);
      if (!identity.empty()) trainedOn.emplace_back(fold.plan.name, identity);
    }
    any[0] = trainedOn.empty() ? 0 : 1;
  });
  comm.broadcast(any, 0, "walk: folds with checkpoints");
  if (any[0].item<std::int64_t>() == 0) return;  // a new walk reads the file only to train
  const data::DataIdentity now = data::identifyFile(identifyWith, comm);
  dist::agreed(comm, "comparing the data with what the folds trained on", [&] {
    if (comm.rank() != 0) return;
    std::vector<std::string> changed, differences;
    for (const auto& [name, text] : trainedOn) {
      const std::optional<data::DataIdentity> before = data::identityFromYaml(text);
      if (!before) continue;  // a checkpoint from before the identity: its own resume judges it
      const data::DataChange change = data::compareData(*before, now, config.data.path);
      if (change.kind != data::DataChange::Kind::kChanged) continue;
      changed.push_back(name);
      for (const auto& difference : change.differences)
        if (std::find(differences.begin(), differences.end(), difference) == differences.end())
          differences.push_back(difference);
    }
    settle(config,
           config.data.path +
               " is not the data the folds trained on: " + str::join(differences, "; ") +
               " (rows appended at the end would extend the walk; these are earlier rows, "
               "restated)",
           changed, accepted);
  });
}

}  // namespace mb::walk
