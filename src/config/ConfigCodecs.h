#pragma once
// How YAML values become typed config fields and back: the YAML names of every enum, and one
// Codec per field type (decode with a message that names the key, encode for --print-config).
// Internal to src/config/: ConfigSchema.cpp's field table is written with these.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/Error.h"
#include "common/Strings.h"
#include "config/Config.h"

namespace mb::detail {

// --- enum names --------------------------------------------------------------

template <class E>
using EnumTable = std::vector<std::pair<E, const char*>>;

template <class E>
const EnumTable<E>& enumTable();

#define MB_ENUM_TABLE(Type, ...)                     \
  template <>                                        \
  inline const EnumTable<Type>& enumTable<Type>() {  \
    static const EnumTable<Type> table{__VA_ARGS__}; \
    return table;                                    \
  }

MB_ENUM_TABLE(Residency, {Residency::kAuto, "auto"}, {Residency::kDevice, "device"},
              {Residency::kHost, "host"}, {Residency::kStream, "stream"})
MB_ENUM_TABLE(DType, {DType::kFp32, "fp32"}, {DType::kBf16, "bf16"}, {DType::kFp16, "fp16"})
MB_ENUM_TABLE(Precision, {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"},
              {Precision::kFp16, "fp16"}, {Precision::kAuto, "auto"})
MB_ENUM_TABLE(DeviceKind, {DeviceKind::kAuto, "auto"}, {DeviceKind::kCpu, "cpu"},
              {DeviceKind::kCuda, "cuda"})
MB_ENUM_TABLE(RecomputeMode, {RecomputeMode::kNone, "none"}, {RecomputeMode::kBlocks, "blocks"},
              {RecomputeMode::kFull, "full"})
MB_ENUM_TABLE(HostSync, {HostSync::kAuto, "auto"}, {HostSync::kStep, "step"},
              {HostSync::kLog, "log"})
MB_ENUM_TABLE(Task, {Task::kRegression, "regression"}, {Task::kClassification, "classification"})
MB_ENUM_TABLE(LossKind, {LossKind::kAuto, "auto"}, {LossKind::kMse, "mse"},
              {LossKind::kHuber, "huber"}, {LossKind::kCrossEntropy, "cross_entropy"})
MB_ENUM_TABLE(OptimizerKind, {OptimizerKind::kAdamW, "adamw"}, {OptimizerKind::kAdam, "adam"},
              {OptimizerKind::kSgd, "sgd"})
MB_ENUM_TABLE(ScheduleKind, {ScheduleKind::kConstant, "constant"},
              {ScheduleKind::kCosine, "cosine"}, {ScheduleKind::kLinear, "linear"})
MB_ENUM_TABLE(BackendKind, {BackendKind::kAuto, "auto"}, {BackendKind::kNccl, "nccl"},
              {BackendKind::kMpi, "mpi"}, {BackendKind::kSingle, "single"})
MB_ENUM_TABLE(ProgressKind, {ProgressKind::kAuto, "auto"}, {ProgressKind::kBar, "bar"},
              {ProgressKind::kLines, "lines"})
MB_ENUM_TABLE(MetricMode, {MetricMode::kMin, "min"}, {MetricMode::kMax, "max"})
MB_ENUM_TABLE(GraphConv, {GraphConv::kGin, "gin"}, {GraphConv::kGcn, "gcn"},
              {GraphConv::kGat, "gat"}, {GraphConv::kNone, "none"})
MB_ENUM_TABLE(GraphPooling, {GraphPooling::kSum, "sum"}, {GraphPooling::kMean, "mean"},
              {GraphPooling::kMax, "max"}, {GraphPooling::kAttention, "attention"})
MB_ENUM_TABLE(ClassWeights, {ClassWeights::kNone, "none"}, {ClassWeights::kBalanced, "balanced"})
MB_ENUM_TABLE(PanelNorm, {PanelNorm::kNone, "none"}, {PanelNorm::kZscore, "zscore"},
              {PanelNorm::kRank, "rank"})
MB_ENUM_TABLE(GraphRebuild, {GraphRebuild::kOnce, "once"}, {GraphRebuild::kPerEpoch, "per_epoch"})
MB_ENUM_TABLE(EncoderKind, {EncoderKind::kLstm, "lstm"}, {EncoderKind::kTransformer, "transformer"})
MB_ENUM_TABLE(TimeUnit, {TimeUnit::kSeconds, "s"}, {TimeUnit::kMillis, "ms"},
              {TimeUnit::kMicros, "us"}, {TimeUnit::kNanos, "ns"}, {TimeUnit::kDays, "days"},
              {TimeUnit::kYyyymmdd, "yyyymmdd"})
#undef MB_ENUM_TABLE

template <class E>
std::string enumName(E value) {
  for (const auto& [candidate, name] : enumTable<E>()) {
    if (candidate == value) return name;
  }
  return "?";
}

template <class E>
std::string enumChoices() {
  std::vector<std::string> names;
  for (const auto& entry : enumTable<E>())
    names.push_back(entry.second);
  return str::join(names, "|");
}

// --- value codecs ------------------------------------------------------------

inline std::string describeNode(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "(empty)";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

[[noreturn]] inline void badValue(const std::string& key, const YAML::Node& node,
                                  const std::string& expected, const std::string& hint = {}) {
  throw ConfigError(key + ": expected " + expected + ", got " + describeNode(node), hint);
}

// By value: GCC 14 (-Wdangling-reference) would take a returned reference for one into the
// temporary `expected` that callers pass.
inline std::string scalarText(const std::string& key, const YAML::Node& node,
                              const std::string& expected) {
  if (!node.IsScalar()) badValue(key, node, expected);
  return node.Scalar();
}

template <class T, class Enable = void>
struct Codec;

template <>
struct Codec<bool> {
  static std::string type() { return "bool"; }
  static bool decode(const std::string& key, const YAML::Node& node) {
    std::string text = scalarText(key, node, "true or false");
    // ::tolower takes an unsigned char's value: a byte >= 0x80 in a plain char is negative (UB).
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (text == "true" || text == "yes" || text == "on" || text == "1") return true;
    if (text == "false" || text == "no" || text == "off" || text == "0") return false;
    badValue(key, node, "true or false");
  }
  static YAML::Node encode(bool value) { return YAML::Node(value); }
};

template <>
struct Codec<std::int64_t> {
  static std::string type() { return "int"; }
  static std::int64_t decode(const std::string& key, const YAML::Node& node) {
    const std::string& text = scalarText(key, node, "an integer");
    try {
      std::size_t used = 0;
      long long value = std::stoll(text, &used, 0);
      if (used == text.size()) return value;
    } catch (const std::exception&) {
    }
    // Accept 1e6 and 1000.0 when they are exact integers: people write step counts that way.
    try {
      std::size_t used = 0;
      double value = std::stod(text, &used);
      if (used == text.size() && std::isfinite(value) && value == std::floor(value) &&
          std::fabs(value) < 9.0e15)
        return static_cast<std::int64_t>(value);
    } catch (const std::exception&) {
    }
    badValue(key, node, "an integer");
  }
  static YAML::Node encode(std::int64_t value) { return YAML::Node(static_cast<long long>(value)); }
};

template <>
struct Codec<double> {
  static std::string type() { return "float"; }
  static double decode(const std::string& key, const YAML::Node& node) {
    const std::string& text = scalarText(key, node, "a number");
    try {
      std::size_t used = 0;
      double value = std::stod(text, &used);
      if (used == text.size() && std::isfinite(value)) return value;
    } catch (const std::exception&) {
    }
    badValue(key, node, "a finite number");
  }
  // Shortest text that reads back as the same double: 0.0042, not 0.0041999999999999997.
  static YAML::Node encode(double value) {
    char buffer[32];
    for (int precision = 1; precision <= 17; ++precision) {
      std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
      if (std::strtod(buffer, nullptr) == value) break;
    }
    return YAML::Node(std::string(buffer));
  }
};

template <>
struct Codec<std::string> {
  static std::string type() { return "string"; }
  static std::string decode(const std::string& key, const YAML::Node& node) {
    if (node.IsNull()) return {};
    return scalarText(key, node, "a string");
  }
  static YAML::Node encode(const std::string& value) { return YAML::Node(value); }
};

// The index of `text` in `names`; else a ConfigError that names the choices and the closest.
inline std::size_t pickName(const std::string& key, const YAML::Node& node,
                            const std::vector<std::string>& names) {
  const std::string choices = str::join(names, "|");
  const std::string& text = scalarText(key, node, "one of " + choices);
  std::string best;
  std::size_t bestDistance = std::numeric_limits<std::size_t>::max();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (text == names[i]) return i;
    std::size_t distance = str::editDistance(text, names[i]);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = names[i];
    }
  }
  badValue(key, node, "one of " + choices,
           bestDistance <= 3 ? "did you mean " + best + "?" : std::string());
}

template <class E>
struct Codec<E, std::enable_if_t<std::is_enum_v<E>>> {
  static std::string type() { return enumChoices<E>(); }
  static E decode(const std::string& key, const YAML::Node& node) {
    std::vector<std::string> names;
    for (const auto& entry : enumTable<E>())
      names.push_back(entry.second);
    return enumTable<E>()[pickName(key, node, names)].first;
  }
  static YAML::Node encode(E value) { return YAML::Node(enumName(value)); }
};

template <>
struct Codec<std::vector<StreamSpec>> {
  static std::string type() { return "list of {name, window}"; }
  static std::vector<StreamSpec> decode(const std::string& key, const YAML::Node& node) {
    const std::string expected = "a list of {name: STREAM, window: ROWS}";
    if (node.IsNull()) return {};
    if (!node.IsSequence()) badValue(key, node, expected);
    std::vector<StreamSpec> streams;
    for (std::size_t i = 0; i < node.size(); ++i) {
      const YAML::Node& item = node[i];
      std::string itemKey = key + "[" + std::to_string(i) + "]";
      if (!item.IsMap()) badValue(itemKey, item, "{name: STREAM, window: ROWS}");
      for (const auto& entry : item) {
        // A key may itself be a list or a map (`{[a]: 1}`): name it, never convert it.
        std::string sub = entry.first.IsScalar() ? entry.first.Scalar() : describeNode(entry.first);
        if (sub != "name" && sub != "window")
          throw ConfigError(itemKey + "." + sub + ": unknown key",
                            "a stream has exactly two keys: name and window");
      }
      if (!item["name"] || !item["window"]) badValue(itemKey, item, "{name: STREAM, window: ROWS}");
      StreamSpec spec;
      spec.name = Codec<std::string>::decode(itemKey + ".name", item["name"]);
      spec.window = Codec<std::int64_t>::decode(itemKey + ".window", item["window"]);
      streams.push_back(spec);
    }
    return streams;
  }
  static YAML::Node encode(const std::vector<StreamSpec>& streams) {
    YAML::Node list(YAML::NodeType::Sequence);
    for (const auto& spec : streams) {
      YAML::Node item;
      item["name"] = spec.name;
      item["window"] = static_cast<long long>(spec.window);
      list.push_back(item);
    }
    return list;
  }
};

}  // namespace mb::detail
