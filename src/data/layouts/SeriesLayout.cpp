#include "data/layouts/SeriesLayout.h"

#include <algorithm>
#include <optional>
#include <set>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Strings.h"

namespace mb::data {
namespace {

constexpr const char* kSeriesName = "series";

std::optional<std::string> checkSeriesConfig(const Config& c) {
  if (c.data.streams.empty())
    return "data.layout = series needs data.streams, e.g. [{name: m1, window: 480}]";
  std::set<std::string> seen;
  for (std::size_t i = 0; i < c.data.streams.size(); ++i) {
    const auto& spec = c.data.streams[i];
    std::string key = "data.streams[" + std::to_string(i) + "]";
    if (spec.name.empty()) return key + ".name is empty";
    if (spec.window < 1) return key + ".window = " + std::to_string(spec.window) + " must be >= 1";
    if (!seen.insert(spec.name).second) return key + ".name '" + spec.name + "' appears twice";
  }
  return std::nullopt;
}

std::optional<std::string> inspectSeries(hid_t file, const std::vector<ListedDataset>& datasets) {
  if (!h5::isGroup(file, "series")) return std::nullopt;
  std::string text = "layout: series, streams:";
  h5::Handle group = h5::openGroup(file, "series", ExitCode::kData);
  for (const auto& name : h5::listGroup(group.get())) {
    for (const auto& d : datasets) {
      if (d.path == "series/" + name + "/values")
        text += " " + name + " " + schema::shapeText(d.info.dims);
    }
  }
  for (const auto& d : datasets) {
    if (str::startsWith(d.path, "samples/end/")) {
      text += "\nsamples: " + std::to_string(d.info.rows()) + " (rows of /" + d.path + ")";
      break;
    }
  }
  return text;
}

SeriesLayout::Stream readStream(hid_t file, const std::string& path, const std::string& group,
                                const std::string& endsGroup, const StreamSpec& spec) {
  SeriesLayout::Stream stream;
  stream.name = spec.name;
  stream.window = spec.window;
  if (!h5::exists(file, group + "/" + spec.name))
    throw DataError(path + ": stream '" + spec.name + "' of data.streams has no group /" + group +
                        "/" + spec.name + schema::siblings(file, group + "/" + spec.name),
                    "data.streams names must match the groups under /" + group);
  stream.values = schema::require(file, path, group + "/" + spec.name + "/values",
                                  "values of stream " + spec.name);
  schema::requireRank(path, stream.values, 2, 2, "[T, F] (rows of stream " + spec.name + ")");
  schema::requireNumeric(path, stream.values);
  stream.ends = schema::require(file, path, endsGroup + "/" + spec.name,
                                "window end rows of stream " + spec.name);
  schema::requireRank(path, stream.ends, 1, 1, "[N]");
  schema::requireInteger(path, stream.ends, "row indices");
  return stream;
}

}  // namespace

LayoutKind seriesLayoutKind() {
  LayoutKind kind;
  kind.name = kSeriesName;
  kind.summary =
      "windows over input streams: /series/<name>/values [T, F], /samples/end/<name> [N], "
      "/targets [N] or [N, K]";
  kind.marker = "/series";
  kind.open = SeriesLayout::open;
  kind.checkConfig = checkSeriesConfig;
  kind.inspect = inspectSeries;
  return kind;
}

SeriesLayout::SeriesLayout(FileSchema schema, std::vector<Stream> streams)
    : Layout(std::move(schema)), streams_(std::move(streams)) {}

std::shared_ptr<const Layout> SeriesLayout::open(hid_t file, const std::string& path,
                                                 const Config& config) {
  FileSchema s;
  s.path = path;
  s.layout = kSeriesName;
  s.classification = config.model.task == Task::kClassification;
  std::string group = schema::stripSlash(config.data.names.series);
  if (!h5::isGroup(file, group))
    throw DataError(path + ": group /" + group + " (the series streams) is missing" +
                        schema::siblings(file, group),
                    std::string(schema::kFormatHint) + "; data.names.series remaps it");
  std::string endsGroup = schema::stripSlash(config.data.names.sampleEnds);
  std::vector<Stream> streams;
  for (const auto& spec : config.data.streams) {
    Stream stream = readStream(file, path, group, endsGroup, spec);
    if (streams.empty()) {
      s.numSamples = stream.ends.info.rows();
    } else {
      schema::requireRows(path, stream.ends, s.numSamples, streams.front().ends);
    }
    streams.push_back(std::move(stream));
  }
  schema::readTargets(s, file, config, streams.front().ends);
  schema::readTimestamps(s, file, config, streams.front().ends);
  return std::shared_ptr<const Layout>(new SeriesLayout(std::move(s), std::move(streams)));
}

void SeriesLayout::checkIndexSlice(hid_t file, std::int64_t begin, std::int64_t end) const {
  Layout::checkIndexSlice(file, begin, end);
  for (const auto& stream : streams_) {
    schema::checkNonDecreasing(file, schema_.path, stream.ends, begin, end, "window end rows", 0,
                               stream.values.info.rows() - 1);
  }
}

void SeriesLayout::describe(DataInfo& info) const {
  Layout::describe(info);
  info.inputs.clear();
  for (const auto& stream : streams_)
    info.inputs.push_back({stream.name, stream.window, stream.values.dim(1)});
}

std::vector<DatasetMeta> SeriesLayout::contentDatasets() const {
  std::vector<DatasetMeta> datasets;
  for (const auto& stream : streams_) {
    datasets.push_back(stream.values);
    datasets.push_back(stream.ends);
  }
  return datasets;
}

std::int64_t SeriesLayout::windowStart(IndexReader& index, std::size_t s,
                                       std::int64_t sample) const {
  return index.at(streams_[s].ends, sample) - streams_[s].window + 1;
}

std::int64_t SeriesLayout::firstUsableSample(IndexReader& index) const {
  std::int64_t first = 0;
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    // Ends are non-decreasing (checked), so "window starts at row >= 0" is monotone in i.
    std::int64_t low = 0, high = schema_.numSamples;
    while (low < high) {
      std::int64_t mid = low + (high - low) / 2;
      if (windowStart(index, s, mid) >= 0) {
        high = mid;
      } else {
        low = mid + 1;
      }
    }
    first = std::max(first, low);
  }
  if (first < schema_.numSamples) return first;
  std::string detail;
  for (const auto& stream : streams_) {
    std::int64_t last = index.at(stream.ends, schema_.numSamples - 1);
    if (last + 1 < stream.window)
      detail = "stream " + stream.name + " has window " + std::to_string(stream.window) +
               " but the last sample ends at row " + std::to_string(last);
  }
  throw DataError(
      schema_.path + ": no sample has a complete window in every stream (" + detail + ")",
      "shorten data.streams[].window or use a longer file");
}

std::int64_t SeriesLayout::firstDisjoint(IndexReader& index, std::int64_t previous,
                                         std::int64_t cut) const {
  // Ends are non-decreasing, so "no stream's window reaches back to `previous`'s windows" is
  // monotone in the sample index: binary search for its first true.
  auto disjoint = [&](std::int64_t sample) {
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      if (windowStart(index, s, sample) <= index.at(streams_[s].ends, previous)) return false;
    }
    return true;
  };
  std::int64_t low = std::max(cut, previous + 1), high = schema_.numSamples;
  while (low < high) {
    std::int64_t mid = low + (high - low) / 2;
    if (disjoint(mid)) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  return low;
}

// Exact, from the end-row arrays: no window of a split shares a row with the previous split's.
NextStart SeriesLayout::oneWindowEmbargo(IndexReader& index) const {
  return [this, &index](std::int64_t previous, std::int64_t cut) {
    return firstDisjoint(index, previous, cut);
  };
}

// Reads, in this order: the end rows of each stream (kIndex), the rows of each stream that
// the samples' windows cover (kInput), the targets.
StorePlan SeriesLayout::planStore(SampleRange samples, DType residentDtype,
                                  IndexReader& index) const {
  StorePlan plan;
  plan.samples = samples;
  const std::int64_t n = samples.size();
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    ReadSpec ends;
    ends.role = Role::kIndex;
    ends.part = s;
    ends.path = streams_[s].ends.path;
    ends.rows = {samples.begin, samples.end};
    ends.shape = {n};
    // int32 row indices halve the index memory (per sample and stream) when rows allow.
    bool narrow = streams_[s].values.info.rows() < (std::int64_t{1} << 31);
    ends.type = narrow ? at::kInt : at::kLong;
    plan.reads.push_back(ends);
  }
  for (std::size_t s = 0; s < streams_.size(); ++s) {
    const Stream& stream = streams_[s];
    ReadSpec values;
    values.part = s;
    values.path = stream.values.path;
    if (n > 0)
      values.rows = {index.at(stream.ends, samples.begin) - stream.window + 1,
                     index.at(stream.ends, samples.end - 1) + 1};
    values.shape = withRows(values.rows.size(), stream.values.info.dims);
    values.type = residentFloatType(residentDtype);
    values.haloRows = stream.window;
    plan.reads.push_back(values);
  }
  plan.reads.push_back(targetsRead(samples));
  return plan;
}

void SeriesLayout::checkInput(const ReadSpec& read, const at::Tensor& values) const {
  const std::string& name = streams_.at(read.part).name;
  requireFinite(schema_, read, values, [&name](std::int64_t row) {
    return "row " + std::to_string(row) + " of stream " + name;
  });
}

// Rebases the end rows onto the rows the store holds (Note [Window gather]).
std::vector<at::Tensor> SeriesLayout::prepareStore(const StorePlan& plan,
                                                   std::vector<at::Tensor> tensors) const {
  const std::size_t streams = streams_.size();
  for (std::size_t s = 0; s < streams; ++s)
    tensors[s] = tensors[s].sub(plan.reads[streams + s].rows.begin);
  return tensors;
}

Batch SeriesLayout::gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
                           at::ScalarType inputType) const {
  const std::size_t streams = streams_.size();
  const std::int64_t count = local.size(0);
  Batch batch;
  for (std::size_t s = 0; s < streams; ++s) {
    const at::Tensor& ends = store[s];
    const at::Tensor& values = store[streams + s];
    const std::int64_t window = streams_[s].window;
    at::Tensor rows = ends.index_select(0, local).sub(window - 1).unsqueeze(1) +
                      at::arange(window, ends.options());  // [B, window]
    batch.inputs.push_back(values.index_select(0, rows.reshape({-1}))
                               .view({count, window, values.size(1)})
                               .to(inputType));  // [B, window, F_s]
  }
  batch.targets = store[2 * streams].index_select(0, local);
  return batch;
}

}  // namespace mb::data
