#include "data/pipeline/DataIdentity.h"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include <yaml-cpp/yaml.h>

#include <ATen/core/Tensor.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Strings.h"
#include "data/Schema.h"
#include "data/pipeline/ContentHash.h"

namespace mb::data {
namespace {

std::string hashText(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::uint64_t hashValue(const std::string& text) {
  return static_cast<std::uint64_t>(std::stoull(text, nullptr, 16));
}

// --- scheme 1: sampled rows -------------------------------------------------------

constexpr int kSchemeOneRows = 32;
constexpr std::uint64_t kSchemeOneSeed = 0x6d65676162617463ULL;  // "megabatc"
// Per-sample arrays were hashed whole up to this many rows; larger ones, and the inputs, by
// sampled rows.
constexpr std::int64_t kSchemeOneWholeRows = std::int64_t{1} << 23;

// The scheme 1 hash of the first `rows` rows of `d` (all of them for rows < 0).
std::string schemeOneHash(hid_t file, const DatasetMeta& d, std::int64_t rows) {
  const std::int64_t bounded = rows < 0 ? d.info.rows() : std::min(rows, d.info.rows());
  if (d.info.dims.size() != 1 || bounded > kSchemeOneWholeRows)
    return hashText(hashSampleRows(file, d, kSchemeOneSeed, bounded, kSchemeOneRows));
  h5::Handle dataset = h5::openDataset(file, d.path, ExitCode::kData);
  const at::Tensor all =
      h5::readRows(dataset.get(), 0, bounded,
                   h5::naturalScalarType(d.info, ExitCode::kData, d.path), ExitCode::kData, d.path);
  return hashText(hashBytes(
      all.data_ptr(), static_cast<std::size_t>(all.numel() * all.element_size()), kSchemeOneSeed));
}

// --- scheme 2: every value (Note [Content hash]) -----------------------------------

HashedDataset hashedFrom(const DatasetIdentity& d) {
  HashedDataset hashed;
  hashed.path = d.path;
  hashed.dims = d.dims;
  hashed.fileType = d.type;
  hashed.type = heldTypeNamed(d.heldAs).value_or(at::kFloat);
  hashed.axis = d.axis;
  return hashed;
}

// The hash the first `rows` rows of `now` had as a dataset of their own: now's sum less its
// units from the one holding row `rows` on, plus that unit cut at `rows`. Reads those rows.
std::string hashOfFirstRows(hid_t file, const DatasetIdentity& now, std::int64_t rows) {
  const HashedDataset grown = hashedFrom(now);
  const std::int64_t cut = rows / grown.unitRows();
  std::uint64_t sum = hashValue(now.hash) - hashFileUnits(file, grown, {cut, grown.units()});
  if (rows % grown.unitRows() != 0) {
    HashedDataset before = grown;
    before.dims[before.axis] = rows;
    sum += hashFileUnits(file, before, {cut, cut + 1});
  }
  return hashText(sum);
}

bool floating(const std::string& heldAs) {
  return str::startsWith(heldAs, "float") || heldAs == "bfloat16";
}

// Why two datasets of the same shape cannot be compared, or "".
std::string incomparable(const DatasetIdentity& old, const DatasetIdentity& now) {
  const std::string name = "/" + old.path;
  if (old.heldAs != now.heldAs) {
    if (floating(old.heldAs) && floating(now.heldAs))
      return name + " was held as " + old.heldAs + ", now as " + now.heldAs +
             " (data.resident_dtype changed; the identity hashes the values the run holds, so "
             "these cannot be compared: resume with data.resident_dtype as it was)";
    return name + " was held as " + old.heldAs + ", now as " + now.heldAs;
  }
  if (old.unitRows != now.unitRows)
    return name + " was hashed in units of " + std::to_string(old.unitRows) + " rows, now of " +
           std::to_string(now.unitRows);
  return "";
}

// The rows of a dataset (along its axis: a [2, E] edge list has E), and its other dimensions.
std::int64_t rowsOf(const DatasetIdentity& d) {
  return d.dims.empty() ? 1 : d.dims[d.axis];
}

std::vector<std::int64_t> otherDims(const DatasetIdentity& d) {
  std::vector<std::int64_t> dims = d.dims;
  if (!dims.empty()) dims.erase(dims.begin() + d.axis);
  return dims;
}

// One dataset of `before` against the file now; appends to `change`. `scheme` is before's.
void compareDataset(const DatasetIdentity& old, const DatasetIdentity* now, int scheme, hid_t file,
                    DataChange& change) {
  const std::string name = "/" + old.path;
  if (now == nullptr) {
    change.differences.push_back(name + " is gone");
    return;
  }
  if (old.type != now->type || otherDims(old) != otherDims(*now) ||
      old.dims.empty() != now->dims.empty() || old.axis != now->axis) {
    change.differences.push_back(name + " was " + str::shapeText(old.dims) + " " + old.type +
                                 ", now " + str::shapeText(now->dims) + " " + now->type);
    return;
  }
  if (scheme >= 2) {
    const std::string why = incomparable(old, *now);
    if (!why.empty()) {
      change.differences.push_back(why);
      return;
    }
  }
  const std::int64_t oldRows = rowsOf(old);
  const std::int64_t nowRows = rowsOf(*now);
  if (nowRows < oldRows) {
    change.differences.push_back(name + " has " + std::to_string(nowRows) +
                                 " rows, fewer than the " + std::to_string(oldRows) + " it had");
    return;
  }
  DatasetMeta meta;  // scheme 1 hashes from the file as it is now
  if (scheme < 2) {
    meta.path = now->path;
    h5::Handle dataset = h5::openDataset(file, now->path, ExitCode::kData);
    meta.info = h5::describe(dataset.get());
  }
  if (nowRows == oldRows) {
    const std::string hash = scheme >= 2 ? now->hash : schemeOneHash(file, meta, -1);
    if (old.hash != hash) change.differences.push_back(name + " holds other values");
    return;
  }
  const std::string first =
      scheme >= 2 ? hashOfFirstRows(file, *now, oldRows) : schemeOneHash(file, meta, oldRows);
  if (first != old.hash) {
    change.differences.push_back(name + " grew from " + std::to_string(oldRows) + " to " +
                                 std::to_string(nowRows) + " rows, and its first " +
                                 std::to_string(oldRows) + " rows hold other values");
    return;
  }
  change.rowsAdded = std::max(change.rowsAdded, nowRows - oldRows);
}

}  // namespace

std::string identityToYaml(const DataIdentity& identity) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  if (identity.scheme >= 2) out << YAML::Key << "scheme" << YAML::Value << identity.scheme;
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
  for (const auto& d : identity.datasets) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value << d.path << YAML::Key
        << "dims" << YAML::Value << YAML::Flow << d.dims << YAML::Key << "type" << YAML::Value
        << d.type;
    if (identity.scheme >= 2) {
      out << YAML::Key << "held_as" << YAML::Value << d.heldAs << YAML::Key << "axis" << YAML::Value
          << d.axis << YAML::Key << "unit_rows" << YAML::Value << d.unitRows;
      if (d.sinceScheme > 1) out << YAML::Key << "since_scheme" << YAML::Value << d.sinceScheme;
    }
    out << YAML::Key << "hash" << YAML::Value << d.hash << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return out.c_str();
}

std::optional<DataIdentity> identityFromYaml(const std::string& text) {
  if (text.empty()) return std::nullopt;
  try {
    const YAML::Node root = YAML::Load(text);
    DataIdentity identity;
    identity.scheme = root["scheme"] ? root["scheme"].as<int>() : 1;
    if (identity.scheme > kIdentityScheme) return std::nullopt;  // a newer megabatch wrote it
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
    for (const auto& d : root["datasets"]) {
      DatasetIdentity dataset;
      dataset.path = d["path"].as<std::string>();
      dataset.dims = d["dims"].as<std::vector<std::int64_t>>();
      dataset.type = d["type"].as<std::string>();
      dataset.hash = d["hash"].as<std::string>();
      if (identity.scheme >= 2) {
        dataset.heldAs = d["held_as"].as<std::string>();
        dataset.axis = d["axis"].as<int>();
        dataset.unitRows = d["unit_rows"].as<std::int64_t>();
        dataset.sinceScheme = d["since_scheme"] ? d["since_scheme"].as<int>() : 1;
      }
      identity.datasets.push_back(std::move(dataset));
    }
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
    compareDataset(old, found == now.datasets.end() ? nullptr : &*found, before.scheme, file.get(),
                   change);
  }
  for (const auto& d : now.datasets) {
    if (d.sinceScheme > before.scheme) continue;  // one `before`'s scheme did not list
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
