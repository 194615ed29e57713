#include "walk/WalkReport.h"

#include <cstdio>
#include <filesystem>

#include "train/checkpoints/DurableFile.h"
#include "train/watch/Metrics.h"

namespace mb::walk {
namespace fs = std::filesystem;

void reportWalk(const Config& config, const std::vector<Fold>& folds,
                const std::vector<std::string>& acceptedChanges) {
  std::string foldsJson;
  for (const Fold& fold : folds) {
    if (!fold.record) continue;
    foldsJson += (foldsJson.empty() ? "" : ",\n  ") + fold.record->json();
  }
  std::string changes;
  for (const auto& change : acceptedChanges) {
    train::JsonRecord record;
    record.add("change", change);
    changes += (changes.empty() ? "" : ", ") + record.str();
  }
  const std::string json =
      "{\"folds\": [\n  " + foldsJson + "\n],\n\"accepted_changes\": [" + changes + "]}\n";
  train::writeFileAtomically((fs::path(config.run.dir) / "walk.json").string(), json);
}

}  // namespace mb::walk
