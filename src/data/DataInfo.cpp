#include "data/DataInfo.h"

#include <yaml-cpp/yaml.h>

#include "common/Error.h"
#include "config/ConfigSchema.h"

namespace mb::data {

const char* toString(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kVal:
      return "val";
    case Split::kTest:
      return "test";
  }
  return "?";
}

std::string describeRange(const SampleRange& range, const TimeSpan& times, TimeUnit unit) {
  std::string text = "[" + std::to_string(range.begin) + ", " + std::to_string(range.end) +
                     "): " + std::to_string(range.size()) + " samples";
  if (times.known)
    text += ", " + formatTime(times.first, unit) + " to " + formatTime(times.last, unit);
  return text;
}

std::string describeSplit(const DataInfo& info, Split split) {
  return describeRange(info.split(split), info.splitTimes[static_cast<int>(split)], info.timeUnit);
}

std::string modelSpecToYaml(const DataInfo& info) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "layout" << YAML::Value << info.layout;
  out << YAML::Key << "inputs" << YAML::Value << YAML::BeginSeq;
  for (const auto& input : info.inputs) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << input.name
        << YAML::Key << "window" << YAML::Value << input.window << YAML::Key << "features"
        << YAML::Value << input.features << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "target_shape" << YAML::Value << YAML::Flow << info.targetShape;
  out << YAML::Key << "integer_targets" << YAML::Value << info.integerTargets;
  out << YAML::Key << "num_classes" << YAML::Value << info.numClasses;
  out << YAML::Key << "vocab_size" << YAML::Value << info.vocabSize;
  out << YAML::Key << "has_timestamps" << YAML::Value << info.hasTimestamps;
  out << YAML::EndMap;
  return out.c_str();
}

DataInfo modelSpecFromYaml(const std::string& text) {
  try {
    YAML::Node root = YAML::Load(text);
    DataInfo info;
    info.layout = root["layout"].as<std::string>();
    for (const auto& input : root["inputs"]) {
      info.inputs.push_back({input["name"].as<std::string>(), input["window"].as<std::int64_t>(),
                             input["features"].as<std::int64_t>()});
    }
    info.targetShape = root["target_shape"].as<std::vector<std::int64_t>>();
    info.integerTargets = root["integer_targets"].as<bool>();
    info.numClasses = root["num_classes"].as<std::int64_t>();
    info.vocabSize = root["vocab_size"].as<std::int64_t>();
    info.hasTimestamps = root["has_timestamps"].as<bool>();
    return info;
  } catch (const YAML::Exception& e) {
    throw CheckpointError(
        std::string("the checkpoint's model description (/meta data_info) is malformed: ") +
        e.what());
  }
}

}  // namespace mb::data
