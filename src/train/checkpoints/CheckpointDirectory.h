#pragma once
// The checkpoints/ folder of a run (DESIGN.md "Run directory"): step-<8 digits>.h5 files, the
// `latest` pointer, best.h5; which to keep, and which to resume from.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "train/checkpoints/Checkpoint.h"

namespace mb::train {

class CheckpointDirectory {
 public:
  CheckpointDirectory(std::string runDir, std::int64_t keepLast);

  const std::string& path() const { return dir_; }
  std::string stepPath(std::int64_t step) const;
  std::string bestPath() const;

  // Writes step-N.h5, points `latest` at it, and removes step files beyond keep_last.
  std::string save(const CheckpointContent& content);
  void saveBest(const CheckpointContent& content);
  // best.h5 becomes the file `stepFile` (a hard link, else a copy), atomically: the evaluation
  // after a step's checkpoint found it the best (Note [Checkpoint before evaluation]).
  void linkBest(const std::string& stepFile);

  // Deletes the *.tmp files of writes that never finished (a rank killed mid-write); they are
  // never loaded, but each can be as large as a checkpoint. Returns their paths.
  std::vector<std::string> removeUnfinishedWrites() const;

  // Step files present, newest first.
  std::vector<std::string> stepFiles() const;
  // The newest checkpoint that loads: `latest` first, then older step files, each failure
  // logged as a warning naming the file. nullopt when the directory has no checkpoints;
  // CheckpointError when some exist but none loads. `alsoCheck` (the trainer's: the config
  // describes the tensors) may refuse a file by throwing an Error; the next one is tried.
  // `unreadable`, when given, receives the files that did not load (not those `alsoCheck`
  // refused).
  std::optional<std::pair<std::string, CheckpointContent>> loadNewest(
      const std::function<void(const std::string&)>& alsoCheck = {},
      std::vector<std::string>* unreadable = nullptr) const;
  // Note [Damaged checkpoints are set aside]: the trainer, once it resumed from `loaded`.
  void setAside(const std::vector<std::string>& unreadable, const std::string& loaded) const;

 private:
  void prune(const std::string& keep);

  std::string dir_;
  std::int64_t keepLast_;
};

// The file name that `dir`/latest names (the newest complete checkpoint there); "" when the
// pointer is missing, unreadable or empty.
std::string readLatestName(const std::string& dir);

}  // namespace mb::train
