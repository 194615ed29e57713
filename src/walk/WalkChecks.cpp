#include "walk/WalkChecks.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/Error.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "config/ConfigLoader.h"

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

void checkDataOfFoldsDone(const Config& config, const std::vector<Fold>& folds,
                          dist::Runtime& runtime, std::vector<std::string>& accepted) {
  (void)config;
  (void)folds;
  (void)runtime;
  (void)accepted;
}

}  // namespace mb::walk
