#include "train/checkpoints/CheckpointDirectory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "common/Error.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "train/checkpoints/DurableFile.h"

namespace mb::train {
namespace fs = std::filesystem;
namespace {

std::int64_t stepOfFile(const std::string& name) {
  static const std::regex pattern("step-([0-9]{8,})\\.h5");
  std::smatch match;
  if (!std::regex_match(name, match, pattern)) return -1;
  return std::stoll(match[1]);
}

}  // namespace

CheckpointDirectory::CheckpointDirectory(std::string runDir, std::int64_t keepLast)
    : dir_((fs::path(runDir) / "checkpoints").string()), keepLast_(keepLast) {}

std::string CheckpointDirectory::stepPath(std::int64_t step) const {
  return (fs::path(dir_) / ("step-" + str::pad(step, 8) + ".h5")).string();
}

std::string CheckpointDirectory::bestPath() const {
  return (fs::path(dir_) / "best.h5").string();
}

std::string CheckpointDirectory::save(const CheckpointContent& content) {
  fs::create_directories(dir_);
  std::string path = stepPath(content.trainer.step);
  writeCheckpointFile(path, content);
  writeFileAtomically((fs::path(dir_) / "latest").string(),
                      fs::path(path).filename().string() + "\n");
  prune(fs::path(path).filename().string());
  return path;
}

void CheckpointDirectory::saveBest(const CheckpointContent& content) {
  fs::create_directories(dir_);
  writeCheckpointFile(bestPath(), content);
}

void CheckpointDirectory::linkBest(const std::string& stepFile) {
  const std::string tmp = bestPath() + ".tmp";
  std::error_code ec;
  fs::remove(tmp, ec);
  // A hard link shares the step file's bytes: keep_last may remove the step file, not these.
  fs::create_hard_link(stepFile, tmp, ec);
  if (ec) {
    ec.clear();
    fs::copy_file(stepFile, tmp, fs::copy_options::overwrite_existing, ec);
  }
  if (ec)
    throw CheckpointError("cannot make " + bestPath() + " from " + stepFile + ": " + ec.message(),
                          writeHint(bestPath(), ec.value()));
  commitFile(tmp, bestPath());
}

std::vector<std::string> CheckpointDirectory::stepFiles() const {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::string name = entry.path().filename().string();
    std::int64_t step = stepOfFile(name);
    if (step >= 0) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> files;
  for (auto& [step, path] : found)
    files.push_back(path);
  return files;
}

std::vector<std::string> CheckpointDirectory::removeUnfinishedWrites() const {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".tmp") continue;
    std::error_code removeError;
    fs::remove(entry.path(), removeError);
    if (removeError) {
      log::get("ckpt").warn("could not remove unfinished write {}: {}", entry.path().string(),
                            removeError.message());
      continue;
    }
    log::get("ckpt").warn(
        "removed {}, left by a write that did not finish (a killed or crashed run)",
        entry.path().string());
    removed.push_back(entry.path().string());
  }
  return removed;
}

// Note [Damaged checkpoints are set aside]
// A checkpoint that does not load (torn, a flipped bit) used to stay where it was: a resume fell
// back past it every time, and since its name is a step file's, keep_last counted it and pruned
// a good older checkpoint in its place; one written by a stop, at a step no schedule writes
// again, stayed for good (the fault soak found it). Once a resume has loaded an older file, the
// trainer renames the damaged ones to `<name>.corrupt` (kept for a look, never loaded, not
// counted) and points `latest` at the file it loaded. When no file loads, nothing is renamed:
// the run ends with exit 4 and the files stay as they are for the user to decide.
void CheckpointDirectory::setAside(const std::vector<std::string>& unreadable,
                                   const std::string& loaded) const {
  for (const auto& path : unreadable) {
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;  // a `latest` that named a file no longer there
    std::string aside = path + ".corrupt";
    for (int n = 1; fs::exists(aside, ec); ++n)
      aside = path + ".corrupt." + std::to_string(n);
    fs::rename(path, aside, ec);
    if (ec) {
      log::get("ckpt").warn("could not set {} aside: {}", path, ec.message());
      continue;
    }
    log::get("ckpt").warn(
        "set the checkpoint that does not load aside as {} (never loaded again; delete it once "
        "you have looked)",
        aside);
  }
  if (!unreadable.empty())
    writeFileAtomically((fs::path(dir_) / "latest").string(),
                        fs::path(loaded).filename().string() + "\n");
}

std::string readLatestName(const std::string& dir) {
  std::ifstream in((fs::path(dir) / "latest").string());
  std::string name;
  std::getline(in, name);
  return str::trim(name);
}

void CheckpointDirectory::prune(const std::string& keep) {
  std::vector<std::string> files = stepFiles();
  for (std::size_t i = static_cast<std::size_t>(keepLast_); i < files.size(); ++i) {
    if (fs::path(files[i]).filename() == keep) continue;
    std::error_code ec;
    fs::remove(files[i], ec);
    if (ec) log::get("ckpt").warn("could not remove old checkpoint {}: {}", files[i], ec.message());
  }
}

std::optional<std::pair<std::string, CheckpointContent>> CheckpointDirectory::loadNewest(
    const std::function<void(const std::string&)>& alsoCheck,
    std::vector<std::string>* unreadable) const {
  std::vector<std::string> candidates;
  std::string latest = readLatestName(dir_);
  if (!latest.empty()) candidates.push_back((fs::path(dir_) / latest).string());
  for (const auto& file : stepFiles()) {
    if (std::find(candidates.begin(), candidates.end(), file) == candidates.end())
      candidates.push_back(file);
  }
  if (candidates.empty()) return std::nullopt;
  std::vector<std::string> failures;
  for (const auto& path : candidates) {
    CheckpointContent content;
    try {
      content = readCheckpointFile(path);
    } catch (const Error& error) {
      log::get("ckpt").warn("{}", error.message());
      failures.push_back(path);
      if (unreadable != nullptr) unreadable->push_back(path);
      continue;
    }
    try {
      if (alsoCheck) alsoCheck(path);
    } catch (const Error& error) {
      log::get("ckpt").warn("{}", error.message());
      failures.push_back(path);
      continue;
    }
    if (!failures.empty())
      log::get("ckpt").warn("falling back to {} (the newer checkpoint could not be loaded)", path);
    return std::make_pair(path, std::move(content));
  }
  throw CheckpointError(
      "no checkpoint in " + dir_ + " can be loaded (" + std::to_string(failures.size()) +
          " tried: " + str::join(failures, ", ") + ")",
      "move the damaged files away to start over, or set run.resume to a good checkpoint");
}

}  // namespace mb::train
