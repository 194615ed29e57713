#include "train/Checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Check.h"
#include "common/Hdf5.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "common/TorchCompat.h"
#include "megabatch/Version.h"

namespace mb::train {
namespace fs = std::filesystem;
namespace {

constexpr ExitCode kCode = ExitCode::kCheckpoint;

void fsyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) throw CheckpointError("cannot open " + path + " to flush it: " + std::strerror(errno));
  int status = ::fsync(fd);
  int error = errno;
  ::close(fd);
  if (status != 0) throw CheckpointError("fsync of " + path + " failed: " + std::strerror(error));
}

std::string parentOf(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// Moves `tmp` over `path` and makes the rename durable.
void commitFile(const std::string& tmp, const std::string& path) {
  fsyncPath(tmp, false);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw CheckpointError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  fsyncPath(parentOf(path), true);
}

std::string nowText() {
  std::time_t now = std::time(nullptr);
  char buffer[64];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
  return buffer;
}

void writeNamed(hid_t file, const std::string& group, const NamedTensors& tensors) {
  h5::Handle handle = h5::createGroup(file, group, kCode);
  h5::WriteOptions options;
  options.fletcher32 = true;
  for (const auto& [name, tensor] : tensors) {
    auto slash = name.rfind('/');
    if (slash == std::string::npos) {
      h5::writeTensor(handle.get(), name, tensor, options, kCode);
    } else {
      std::string subgroup = name.substr(0, slash);
      if (!h5::exists(handle.get(), subgroup)) h5::createGroup(handle.get(), subgroup, kCode);
      h5::Handle sub = h5::openGroup(handle.get(), subgroup, kCode);
      h5::writeTensor(sub.get(), name.substr(slash + 1), tensor, options, kCode);
    }
  }
}

// Reads every dataset below `group` (recursively), naming them "a/b" relative to it.
void readNamed(hid_t loc, const std::string& prefix, NamedTensors& out) {
  for (const auto& name : h5::listGroup(loc)) {
    if (h5::isGroup(loc, name)) {
      h5::Handle sub = h5::openGroup(loc, name, kCode);
      readNamed(sub.get(), prefix + name + "/", out);
    } else {
      out.emplace_back(prefix + name, h5::readTensor(loc, name, kCode));
    }
  }
}

void writeTrainerState(hid_t file, const TrainerState& s) {
  h5::Handle g = h5::createGroup(file, "trainer", kCode);
  auto put = [&](const char* name, std::int64_t value) { h5::writeAttribute(g.get(), name, value, kCode); };
  put("step", s.step);
  put("epoch", s.epoch);
  put("batch_in_epoch", s.batchInEpoch);
  put("samples_seen", s.samplesSeen);
  put("canonical_shards", s.canonicalShards);
  put("seed", s.seed);
  put("global_batch", s.globalBatch);
  put("bad_steps", s.badSteps);
  put("best_step", s.bestStep);
  put("evals_without_improvement", s.evalsWithoutImprovement);
  h5::writeAttribute(g.get(), "best_metric", s.bestMetric, kCode);
}

TrainerState readTrainerState(hid_t file) {
  h5::Handle g = h5::openGroup(file, "trainer", kCode);
  auto get = [&](const char* name) { return h5::readIntAttribute(g.get(), name, kCode); };
  TrainerState s;
  s.step = get("step");
  s.epoch = get("epoch");
  s.batchInEpoch = get("batch_in_epoch");
  s.samplesSeen = get("samples_seen");
  s.canonicalShards = get("canonical_shards");
  s.seed = get("seed");
  s.globalBatch = get("global_batch");
  s.badSteps = get("bad_steps");
  s.bestStep = get("best_step");
  s.evalsWithoutImprovement = get("evals_without_improvement");
  s.bestMetric = h5::readDoubleAttribute(g.get(), "best_metric", kCode);
  return s;
}

void writeMeta(hid_t file, const CheckpointContent& c) {
  h5::Handle g = h5::createGroup(file, "meta", kCode);
  h5::writeAttribute(g.get(), "format_version", kCheckpointFormatVersion, kCode);
  h5::writeAttribute(g.get(), "config", c.configYaml, kCode);
  h5::writeAttribute(g.get(), "world_size", c.worldSize, kCode);
  h5::writeAttribute(g.get(), "megabatch_version", std::string(MEGABATCH_VERSION), kCode);
  h5::writeAttribute(g.get(), "torch_version", compat::torchVersion(), kCode);
  h5::writeAttribute(g.get(), "data_fingerprint", c.dataFingerprint, kCode);
  h5::writeAttribute(g.get(), "data_info", c.dataInfoYaml, kCode);
  h5::writeAttribute(g.get(), "saved_at", nowText(), kCode);
  h5::writeAttribute(g.get(), "optimizer", c.optimizerKind, kCode);
  h5::writeAttribute(g.get(), "optimizer_steps", c.optimizerSteps, kCode);
  h5::writeAttribute(g.get(), "lr", c.lr, kCode);
}

void readMeta(hid_t file, CheckpointContent& c) {
  h5::Handle g = h5::openGroup(file, "meta", kCode);
  c.formatVersion = h5::readIntAttribute(g.get(), "format_version", kCode);
  if (c.formatVersion > kCheckpointFormatVersion)
    throw CheckpointError(h5::fileNameOf(file) + ": checkpoint format " + std::to_string(c.formatVersion) +
                              " is newer than this megabatch understands (" +
                              std::to_string(kCheckpointFormatVersion) + ")",
                          "resume with the megabatch version that wrote it");
  c.configYaml = h5::readStringAttribute(g.get(), "config", kCode);
  c.worldSize = h5::readIntAttribute(g.get(), "world_size", kCode);
  c.megabatchVersion = h5::readStringAttribute(g.get(), "megabatch_version", kCode);
  c.torchVersion = h5::readStringAttribute(g.get(), "torch_version", kCode);
  c.dataFingerprint = h5::readStringAttribute(g.get(), "data_fingerprint", kCode);
  c.dataInfoYaml = h5::readStringAttribute(g.get(), "data_info", kCode);
  c.savedAt = h5::readStringAttribute(g.get(), "saved_at", kCode);
  c.optimizerKind = h5::readStringAttribute(g.get(), "optimizer", kCode);
  c.optimizerSteps = h5::readIntAttribute(g.get(), "optimizer_steps", kCode);
  c.lr = h5::readDoubleAttribute(g.get(), "lr", kCode);
}

void writeContents(const std::string& path, const CheckpointContent& content) {
  h5::Handle file = h5::createFile(path, /*latestFormat=*/true, kCode);
  writeMeta(file.get(), content);
  writeTrainerState(file.get(), content.trainer);
  writeNamed(file.get(), "model", content.model);
  writeNamed(file.get(), "optimizer", content.optimizer);
  writeNamed(file.get(), "extra", content.extra);
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0)
    throw CheckpointError(path + ": flushing the checkpoint failed (" + detail::hdf5ErrorStack() + ")");
  file.close(kCode, path);
}

std::int64_t stepOfFile(const std::string& name) {
  static const std::regex pattern("step-([0-9]{8,})\\.h5");
  std::smatch match;
  if (!std::regex_match(name, match, pattern)) return -1;
  return std::stoll(match[1]);
}

}  // namespace

void writeFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw CheckpointError("cannot write " + tmp + " (disk full or not writable?)");
    }
  }
  try {
    commitFile(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

void writeCheckpointFile(const std::string& path, const CheckpointContent& content) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  std::string tmp = path + ".tmp";
  try {
    writeContents(tmp, content);
    commitFile(tmp, path);
  } catch (const Error& error) {
    std::remove(tmp.c_str());
    std::error_code ec;
    auto space = fs::space(parentOf(path), ec);
    std::string hint = !ec && space.available < (64u << 20)
                           ? "the disk holding " + parentOf(path) + " is (nearly) full: free space or move run.dir"
                           : "check that " + parentOf(path) + " is writable and has free space";
    throw CheckpointError("writing checkpoint " + path + " failed: " + error.message() +
                              ". The previous checkpoint is intact.",
                          hint);
  }
}

CheckpointContent readCheckpointFile(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  try {
    h5::Handle file = h5::openFile(path, false, kCode);
    CheckpointContent c;
    readMeta(file.get(), c);
    c.trainer = readTrainerState(file.get());
    h5::Handle model = h5::openGroup(file.get(), "model", kCode);
    readNamed(model.get(), "", c.model);
    h5::Handle optimizer = h5::openGroup(file.get(), "optimizer", kCode);
    readNamed(optimizer.get(), "", c.optimizer);
    h5::Handle extra = h5::openGroup(file.get(), "extra", kCode);
    readNamed(extra.get(), "", c.extra);
    return c;
  } catch (const Error& error) {
    throw CheckpointError("checkpoint " + path + " is unreadable, corrupt, or truncated: " + error.message(),
                          "an older checkpoint in the same directory is used automatically; "
                          "`megabatch inspect` shows what a file contains");
  }
}

bool isCheckpointFile(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  if (!h5::isHdf5File(path)) return false;
  try {
    h5::Handle file = h5::openFile(path, false, kCode);
    return h5::isGroup(file.get(), "meta") && h5::isGroup(file.get(), "model");
  } catch (const Error&) {
    return false;
  }
}

namespace {

// The model kind from the resolved config saved in the checkpoint; "model kind unknown" when a
// hand-made file carries no config.
std::string savedModelKind(const std::string& configYaml) {
  try {
    const YAML::Node kind = YAML::Load(configYaml)["model"]["kind"];
    if (kind && kind.IsScalar()) return kind.as<std::string>();
  } catch (const YAML::Exception&) {
  }
  return "model kind unknown";
}

}  // namespace

std::string describeCheckpoint(const std::string& path) {
  CheckpointContent c = readCheckpointFile(path);
  std::ostringstream out;
  std::int64_t parameters = 0;
  std::int64_t bytes = 0;
  for (const auto& [name, t] : c.model) {
    parameters += t.numel();
    bytes += t.numel() * t.element_size();
  }
  const TrainerState& s = c.trainer;
  out << path << ": megabatch checkpoint (format " << c.formatVersion << "), all checksums verified\n"
      << "  saved:        " << c.savedAt << " by megabatch " << c.megabatchVersion << ", LibTorch "
      << c.torchVersion << ", world size " << c.worldSize << "\n"
      << "  position:     step " << s.step << ", epoch " << s.epoch << ", next batch " << s.batchInEpoch
      << ", samples seen " << s.samplesSeen << "\n"
      << "  data order:   V = " << s.canonicalShards << " canonical shards, seed " << s.seed
      << ", global batch " << s.globalBatch << " (resumable on 1.." << s.canonicalShards << " ranks)\n"
      << "  optimizer:    " << c.optimizerKind << ", " << c.optimizerSteps << " steps, lr " << c.lr << ", "
      << c.optimizer.size() << " state tensors\n"
      << "  early stop:   best " << s.bestMetric << " at step " << s.bestStep << ", "
      << s.evalsWithoutImprovement << " evaluations since\n"
      << "  data:         fingerprint " << c.dataFingerprint << "\n"
      << "  model:        " << savedModelKind(c.configYaml) << ", " << c.model.size() << " tensors, "
      << parameters << " values ("
      << str::humanBytes(static_cast<double>(bytes)) << ")\n";
  for (const auto& [name, t] : c.model) out << "    " << name << " " << t.sizes() << "\n";
  if (!c.extra.empty()) {
    out << "  extra state:\n";
    for (const auto& [name, t] : c.extra) out << "    " << name << " " << t.sizes() << "\n";
  }
  return out.str();
}

CheckpointDirectory::CheckpointDirectory(std::string runDir, std::int64_t keepLast)
    : dir_((fs::path(runDir) / "checkpoints").string()), keepLast_(keepLast) {}

std::string CheckpointDirectory::stepPath(std::int64_t step) const {
  return (fs::path(dir_) / ("step-" + str::pad(step, 8) + ".h5")).string();
}

std::string CheckpointDirectory::bestPath() const { return (fs::path(dir_) / "best.h5").string(); }

std::string CheckpointDirectory::save(const CheckpointContent& content) {
  fs::create_directories(dir_);
  std::string path = stepPath(content.trainer.step);
  writeCheckpointFile(path, content);
  writeFileAtomically((fs::path(dir_) / "latest").string(), fs::path(path).filename().string() + "\n");
  prune(fs::path(path).filename().string());
  return path;
}

void CheckpointDirectory::saveBest(const CheckpointContent& content) {
  fs::create_directories(dir_);
  writeCheckpointFile(bestPath(), content);
}

std::vector<std::string> CheckpointDirectory::stepFiles() const {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::string name = entry.path().filename().string();
    std::int64_t step = stepOfFile(name);
    if (step >= 0) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> files;
  for (auto& [step, path] : found) files.push_back(path);
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
      log::get("ckpt").warn("could not remove unfinished write {}: {}", entry.path().string(), removeError.message());
      continue;
    }
    log::get("ckpt").warn("removed {}, left by a write that did not finish (a killed or crashed run)",
                          entry.path().string());
    removed.push_back(entry.path().string());
  }
  return removed;
}

std::string CheckpointDirectory::readLatestName() const {
  std::ifstream in((fs::path(dir_) / "latest").string());
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

std::optional<std::pair<std::string, CheckpointContent>> CheckpointDirectory::loadNewest() const {
  std::vector<std::string> candidates;
  std::string latest = readLatestName();
  if (!latest.empty()) candidates.push_back((fs::path(dir_) / latest).string());
  for (const auto& file : stepFiles()) {
    if (std::find(candidates.begin(), candidates.end(), file) == candidates.end()) candidates.push_back(file);
  }
  if (candidates.empty()) return std::nullopt;
  std::vector<std::string> failures;
  for (const auto& path : candidates) {
    try {
      CheckpointContent content = readCheckpointFile(path);
      if (!failures.empty())
        log::get("ckpt").warn("falling back to {} (the newer checkpoint could not be loaded)", path);
      return std::make_pair(path, std::move(content));
    } catch (const Error& error) {
      log::get("ckpt").warn("{}", error.message());
      failures.push_back(path);
    }
  }
  throw CheckpointError("no checkpoint in " + dir_ + " can be loaded (" + std::to_string(failures.size()) +
                            " tried: " + str::join(failures, ", ") + ")",
                        "move the damaged files away to start over, or set run.resume to a good checkpoint");
}

}  // namespace mb::train
