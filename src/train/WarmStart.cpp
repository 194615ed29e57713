#include "train/WarmStart.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include <yaml-cpp/yaml.h>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "config/ConfigSchema.h"
#include "data/Schema.h"
#include "dist/Agreement.h"
#include "dist/Communicator.h"
#include "model/Model.h"
#include "train/CheckpointModel.h"
#include "train/Trainer.h"
#include "train/loop/Optimizer.h"
#include "train/watch/Metrics.h"
#include "train/watch/TrainLog.h"

namespace mb::train {
namespace {

// FNV-1a over the file's bytes: names the exact file a run started from (a checkpoint written
// again at the same path has another checksum).
std::string fileChecksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buffer(1 << 20);
  std::uint64_t hash = data::hashBytes(nullptr, 0);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hash = data::hashBytes(buffer.data(), static_cast<std::size_t>(in.gcount()), hash);
  }
  if (in.bad())
    throw CheckpointError(path + ": read error while taking its checksum (train.init_from)");
  char text[32];
  std::snprintf(text, sizeof(text), "fnv1a64:%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::string originYaml(const std::string& path, const CheckpointContent& content, bool optimizer) {
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(path, ec).lexically_normal().string();
  YAML::Emitter out;
  out << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "path" << YAML::Value << (ec ? path : absolute);
  out << YAML::Key << "step" << YAML::Value << content.trainer.step;
  out << YAML::Key << "checksum" << YAML::Value << fileChecksum(path);
  out << YAML::Key << "data_fingerprint" << YAML::Value << content.dataFingerprint;
  out << YAML::Key << "optimizer" << YAML::Value << optimizer;
  out << YAML::EndMap;
  return out.c_str();
}

std::optional<YAML::Node> parseOrigin(const std::string& text) {
  if (text.empty()) return std::nullopt;
  try {
    YAML::Node node = YAML::Load(text);
    if (node.IsMap()) return node;
  } catch (const YAML::Exception&) {
  }
  return std::nullopt;
}

std::string field(const YAML::Node& node, const char* key) {
  return node[key] && node[key].IsScalar() ? node[key].Scalar() : std::string("?");
}

}  // namespace

WarmStart readWarmStart(const TrainConfig& train) {
  WarmStart warm;
  readNewestCheckpoint(train.initFrom, [&](const std::string& path) {
    warm.path = path;
    warm.content = readCheckpointFile(path);
    checkConfigDescribesTensors(path);
  });
  warm.originYaml = originYaml(warm.path, warm.content, train.initFromOptimizer);
  return warm;
}

std::string describeOrigin(const std::string& text) {
  std::optional<YAML::Node> node = parseOrigin(text);
  if (!node) return text;
  return field(*node, "path") + " (step " + field(*node, "step") + ", " + field(*node, "checksum") +
         ", optimizer moments " + (field(*node, "optimizer") == "true" ? "kept" : "fresh") +
         "), trained on data " + field(*node, "data_fingerprint");
}

void addOriginFields(JsonRecord& record, const std::string& text) {
  std::optional<YAML::Node> node = parseOrigin(text);
  if (!node) return;
  record.add("init_from", field(*node, "path"));
  if ((*node)["step"]) record.add("init_from_step", (*node)["step"].as<std::int64_t>(0));
  record.add("init_from_checksum", field(*node, "checksum"));
  record.add("init_from_data_fingerprint", field(*node, "data_fingerprint"));
  record.add("init_from_optimizer", field(*node, "optimizer"));
}

// --- the trainer's side ------------------------------------------------------------

void Trainer::findWarmStart(bool resuming) {
  const std::string& from = config_.train.initFrom;
  if (from.empty()) return;
  if (resuming) {
    trainLog().info(
        "train.init_from = {} is ignored: this run resumes from its own checkpoint (a resume "
        "wins, so a requeued job never starts again from the old weights)",
        from);
    return;
  }
  dist::agreed(control(), "reading train.init_from", [&] {
    if (!isRoot()) return;
    warmStart_ = std::make_unique<WarmStart>(readWarmStart(config_.train));
    initFromYaml_ = warmStart_->originYaml;
    trainLog().info("a new run from the weights of {}", describeOrigin(initFromYaml_));
  });
  warmStarting_ = true;  // every rank: the config is the same
}

void Trainer::applyWarmStart() {
  if (!warmStarting_) return;
  const bool withOptimizer = config_.train.initFromOptimizer;
  dist::agreed(control(), "loading train.init_from", [&] {
    if (!isRoot()) return;
    const CheckpointContent& content = warmStart_->content;
    loadModelState(*model_, content.model, "train.init_from = " + warmStart_->path,
                   std::numeric_limits<std::size_t>::max(),
                   "train.init_from needs the model this config builds: the same model.* keys "
                   "and data shape as the run that wrote it (`megabatch inspect " +
                       warmStart_->path + "` shows its config)");
    if (!withOptimizer) return;
    if (content.optimizerKind != toString(config_.optim.name))
      throw CheckpointError("train.init_from_optimizer: " + warmStart_->path + " holds " +
                                content.optimizerKind +
                                " state, but optim.name = " + toString(config_.optim.name),
                            "set optim.name = " + content.optimizerKind +
                                ", or train.init_from_optimizer = false for fresh moments");
    optimizer_->loadState(content.optimizer, content.optimizerSteps);
  });
  // The parameters reach every rank in restoreFrom (synchronizeParameters); the moments here.
  if (withOptimizer) {
    for (auto& [name, tensor] : optimizer_->state())
      dataComm_->broadcast(tensor, 0, "optimizer state " + name);
    at::Tensor steps = at::full({1}, static_cast<double>(optimizer_->stepCount()), at::kDouble);
    control().broadcast(steps, 0, "optimizer steps");
    if (!isRoot()) optimizer_->loadState(optimizer_->state(), std::llround(steps.item<double>()));
  }
  warmStart_.reset();  // free the host copy
}

void Trainer::recordWarmStart() {
  if (!warmStarting_ || !metrics_) return;
  JsonRecord record;
  record.add("event", "init_from").add("step", state_.step);
  addOriginFields(record, initFromYaml_);
  record.addTime("time", unixSeconds());
  metrics_->write(record);
}

}  // namespace mb::train
