#include "walk/FoldRecord.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "common/Strings.h"
#include "config/ConfigSchema.h"
#include "data/tools/Json.h"
#include "train/checkpoints/DurableFile.h"
#include "train/watch/Metrics.h"

namespace mb::walk {
namespace fs = std::filesystem;
namespace {

std::string recordPath(const std::string& runDir, const std::string& name) {
  return (fs::path(foldDirectory(runDir, name)) / "fold.json").string();
}

std::string text(const json::Value& root, const char* key) {
  const json::Value* value = root.find(key);
  return value != nullptr && value->isString() ? value->text : std::string();
}

double number(const json::Value& root, const char* key) {
  const json::Value* value = root.find(key);
  return value != nullptr && value->isNumber() ? value->number : 0.0;
}

// How a run goes, not what it computes: a walk may change these between its runs.
bool howItRuns(const std::string& key) {
  static const char* const prefixes[] = {"run.",
                                         "dist.timeout_s",
                                         "train.threads",
                                         "train.device",
                                         "train.host_sync",
                                         "train.memory_",
                                         "train.gpu_util",
                                         "data.path",
                                         "data.residency",
                                         "data.host_mmap",
                                         "data.memory_",
                                         "data.allow_external",
                                         "data.stream_chunk_items",
                                         "walk.to"};
  for (const char* prefix : prefixes)
    if (str::startsWith(key, prefix)) return true;
  return false;
}

}  // namespace

double FoldRecord::overheadSeconds() const {
  return std::max(0.0, wallSeconds - trainSeconds - evalSeconds - predictSeconds);
}

std::string FoldRecord::json() const {
  train::JsonRecord record;
  record.add("fold", name).add("from", from).add("to", to).add("periods", periods);
  record.add("train", train).add("val", val).add("checkpoint", checkpoint);
  record.add("rows", rows).add("step", step).add("steps_run", stepsRun);
  record.add("seconds_training", trainSeconds).add("seconds_evaluation", evalSeconds);
  record.add("seconds_prediction", predictSeconds).add("seconds_overhead", overheadSeconds());
  record.add("seconds_wall", wallSeconds);
  record.add("rss_bytes", rssBytes).add("peak_rss_bytes", peakRssBytes);
  return record.str();
}

std::string foldDirectory(const std::string& runDir, const std::string& name) {
  return (fs::path(runDir) / "folds" / name).string();
}

void writeFoldRecord(const std::string& runDir, const FoldRecord& record) {
  train::writeFileAtomically(recordPath(runDir, record.name), record.json() + "\n");
}

std::optional<FoldRecord> readFoldRecord(const std::string& runDir, const std::string& name) {
  std::ifstream in(recordPath(runDir, name));
  if (!in) return std::nullopt;
  std::stringstream content;
  content << in.rdbuf();
  json::Value root;
  try {
    root = json::parse(content.str());
  } catch (const json::ParseError&) {
    return std::nullopt;
  }
  if (!root.isObject() || text(root, "fold") != name) return std::nullopt;
  FoldRecord record;
  record.name = name;
  record.from = text(root, "from");
  record.to = text(root, "to");
  record.periods = text(root, "periods");
  record.train = text(root, "train");
  record.val = text(root, "val");
  record.checkpoint = text(root, "checkpoint");
  record.rows = static_cast<std::int64_t>(number(root, "rows"));
  record.step = static_cast<std::int64_t>(number(root, "step"));
  record.stepsRun = static_cast<std::int64_t>(number(root, "steps_run"));
  record.trainSeconds = number(root, "seconds_training");
  record.evalSeconds = number(root, "seconds_evaluation");
  record.predictSeconds = number(root, "seconds_prediction");
  record.wallSeconds = number(root, "seconds_wall");
  record.rssBytes = static_cast<std::int64_t>(number(root, "rss_bytes"));
  record.peakRssBytes = static_cast<std::int64_t>(number(root, "peak_rss_bytes"));
  return record;
}

std::vector<std::string> changedKeys(const Config& now, const Config& trained) {
  std::vector<std::string> keys;
  for (const ConfigField& field : configFields()) {
    if (howItRuns(field.key)) continue;
    if (YAML::Dump(field.emit(now)) != YAML::Dump(field.emit(trained))) keys.push_back(field.key);
  }
  return keys;
}

}  // namespace mb::walk
