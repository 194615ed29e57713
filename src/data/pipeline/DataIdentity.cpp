#include "data/pipeline/DataIdentity.h"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include <yaml-cpp/yaml.h>

#include <ATen/core/Tensor.h>

#include "common/Error.h"
#include "common/Strings.h"
#include "data/Layout.h"

namespace mb::data {
namespace {

constexpr int kHashedRows = 32;
constexpr std::uint64_t kSeed = 0x6d65676162617463ULL;  // "megabatc"

std::string hex(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// Per-sample arrays (targets, timestamps, window ends) are hashed whole up to this many rows:
// an edited target anywhere is seen. Larger ones, and the inputs, by sampled rows.
constexpr std::int64_t kWholeRows = std::int64_t{1} << 23;

std::string hashOf(hid_t file, const DatasetMeta& d, std::int64_t rows) {
  const std::int64_t bounded = rows < 0 ? d.info.rows() : std::min(rows, d.info.rows());
  if (d.info.dims.size() != 1 || bounded > kWholeRows)
    return hex(hashSampleRows(file, d, kSeed, bounded, kHashedRows));
  h5::Handle dataset = h5::openDataset(file, d.path, ExitCode::kData);
  const at::Tensor all =
      h5::readRows(dataset.get(), 0, bounded,
                   h5::naturalScalarType(d.info, ExitCode::kData, d.path), ExitCode::kData, d.path);
  return hex(
      hashBytes(all.data_ptr(), static_cast<std::size_t>(all.numel() * all.element_size()), kSeed));
}

// One dataset of `before` against the file now; appends to `change`.
void compareDataset(const DatasetIdentity& old, const DatasetIdentity* now, hid_t file,
                    DataChange& change) {
  const std::string name = "/" + old.path;
  if (now == nullptr) {
    change.differences.push_back(name + " is gone");
    return;
  }
  const std::vector<std::int64_t> oldTrailing(
      old.dims.begin() + std::min<std::size_t>(1, old.dims.size()), old.dims.end());
  const std::vector<std::int64_t> nowTrailing(
      now->dims.begin() + std::min<std::size_t>(1, now->dims.size()), now->dims.end());
  if (old.type != now->type || oldTrailing != nowTrailing ||
      old.dims.empty() != now->dims.empty()) {
    change.differences.push_back(name + " was " + str::shapeText(old.dims) + " " + old.type +
                                 ", now " + str::shapeText(now->dims) + " " + now->type);
    return;
  }
  const std::int64_t oldRows = old.dims.empty() ? 1 : old.dims[0];
  const std::int64_t nowRows = now->dims.empty() ? 1 : now->dims[0];
  if (nowRows < oldRows) {
    change.differences.push_back(name + " has " + std::to_string(nowRows) +
                                 " rows, fewer than the " + std::to_string(oldRows) + " it had");
    return;
  }
  if (nowRows == oldRows) {
    if (old.hash != now->hash) change.differences.push_back(name + " holds other values");
    return;
  }
  DatasetMeta meta;
  meta.path = now->path;
  h5::Handle dataset = h5::openDataset(file, now->path, ExitCode::kData);
  meta.info = h5::describe(dataset.get());
  if (hashOf(file, meta, oldRows) != old.hash) {
    change.differences.push_back(name + " grew from " + std::to_string(oldRows) + " to " +
                                 std::to_string(nowRows) + " rows, and its first " +
                                 std::to_string(oldRows) + " rows hold other values");
    return;
  }
  change.rowsAdded = std::max(change.rowsAdded, nowRows - oldRows);
}

}  // namespace

DataIdentity identify(hid_t file, const Layout& layout, const DataInfo& info) {
  DataIdentity identity;
  identity.samples = info.numSamples;
  identity.splits = info.splits;
  identity.splitTimes = info.splitTimes;
  identity.timeUnit = info.timeUnit;
  identity.splitsByTime = info.splitsByTime;
  std::vector<DatasetMeta> datasets = layout.contentDatasets();
  datasets.push_back(layout.schema().targets);
  datasets.push_back(layout.schema().timestamps);
  for (const auto& d : datasets) {
    if (!d.present()) continue;
    if (std::any_of(identity.datasets.begin(), identity.datasets.end(),
                    [&](const DatasetIdentity& seen) { return seen.path == d.path; }))
      continue;
    identity.datasets.push_back({d.path, d.info.dims, d.info.typeName(), hashOf(file, d, -1)});
  }
  return identity;
}

std::string identityToYaml(const DataIdentity& identity) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "samples" << YAML::Value << identity.samples;
  out << YAML::Key << "splits_by_time" << YAML::Value << identity.splitsByTime;
  out << YAML::Key << "time_unit" << YAML::Value << timeUnitName(identity.timeUnit);
  out << YAML::Key << "splits" << YAML::Value << YAML::BeginMap;
  for (int s = 0; s < 3; ++s) {
    const TimeSpan& t = identity.splitTimes[s];
    out << YAML::Key << toString(static_cast<Split>(s)) << YAML::Value << YAML::Flow
        << YAML::BeginMap << YAML::Key << "begin" << YAML::Value << identity.splits[s].begin
        << YAML::Key << "end" << YAML::Value << identity.splits[s].end;
    if (t.known)
      out << YAML::Key << "first_time" << YAML::Value << t.first << YAML::Key << "last_time"
          << YAML::Value << t.last;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::Key << "datasets" << YAML::Value << YAML::BeginSeq;
  for (const auto& d : identity.datasets)
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value << d.path << YAML::Key
        << "dims" << YAML::Value << YAML::Flow << d.dims << YAML::Key << "type" << YAML::Value
        << d.type << YAML::Key << "hash" << YAML::Value << d.hash << YAML::EndMap;
  out << YAML::EndSeq << YAML::EndMap;
  return out.c_str();
}

std::optional<DataIdentity> identityFromYaml(const std::string& text) {
  if (text.empty()) return std::nullopt;
  try {
    const YAML::Node root = YAML::Load(text);
    DataIdentity identity;
    identity.samples = root["samples"].as<std::int64_t>();
    identity.splitsByTime = root["splits_by_time"].as<bool>();
    identity.timeUnit =
        timeUnitNamed(root["time_unit"].as<std::string>()).value_or(TimeUnit::kSeconds);
    for (int s = 0; s < 3; ++s) {
      const YAML::Node split = root["splits"][toString(static_cast<Split>(s))];
      identity.splits[s] = {split["begin"].as<std::int64_t>(), split["end"].as<std::int64_t>()};
      if (split["first_time"])
        identity.splitTimes[s] = {split["first_time"].as<std::int64_t>(),
                                  split["last_time"].as<std::int64_t>(), true};
    }
    for (const auto& d : root["datasets"])
      identity.datasets.push_back({d["path"].as<std::string>(),
                                   d["dims"].as<std::vector<std::int64_t>>(),
                                   d["type"].as<std::string>(), d["hash"].as<std::string>()});
    return identity;
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

DataChange compareData(const DataIdentity& before, const DataIdentity& now,
                       const std::string& path) {
  DataChange change;
  change.trainHeld =
      before.splits[0].begin == now.splits[0].begin && before.splits[0].end == now.splits[0].end;
  change.valHeld =
      before.splits[1].begin == now.splits[1].begin && before.splits[1].end == now.splits[1].end;
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::Handle file = h5::openFile(path, false, ExitCode::kData);
  for (const auto& old : before.datasets) {
    auto found = std::find_if(now.datasets.begin(), now.datasets.end(),
                              [&](const DatasetIdentity& d) { return d.path == old.path; });
    compareDataset(old, found == now.datasets.end() ? nullptr : &*found, file.get(), change);
  }
  for (const auto& d : now.datasets) {
    if (std::none_of(before.datasets.begin(), before.datasets.end(),
                     [&](const DatasetIdentity& old) { return old.path == d.path; }))
      change.differences.push_back("/" + d.path + " is new");
  }
  if (!change.differences.empty())
    change.kind = DataChange::Kind::kChanged;
  else if (change.rowsAdded > 0)
    change.kind = DataChange::Kind::kAppended;
  return change;
}

}  // namespace mb::data
