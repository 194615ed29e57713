#include "data/layouts/SamplesLayout.h"

#include <optional>

namespace mb::data {
namespace {

constexpr const char* kSamplesName = "samples";

// Store tensors, in planStore's order.
enum SamplesSlot : std::size_t { kFeatures = 0, kTargets = 1 };

std::optional<std::string> inspectSamples(hid_t /*file*/,
                                          const std::vector<ListedDataset>& datasets) {
  for (const auto& d : datasets) {
    if (d.path != "features") continue;
    return "layout: samples, features " + schema::shapeText(d.info.dims) + " " + d.info.typeName() +
           "\nsamples: " + std::to_string(d.info.rows());
  }
  return std::nullopt;
}

}  // namespace

LayoutKind samplesLayoutKind() {
  LayoutKind kind;
  kind.name = kSamplesName;
  kind.summary = "one row per sample: /features [N, T, F] or [N, F], /targets [N] or [N, K]";
  kind.marker = "/features";
  kind.open = SamplesLayout::open;
  kind.inspect = inspectSamples;
  return kind;
}

SamplesLayout::SamplesLayout(FileSchema schema, DatasetMeta features)
    : Layout(std::move(schema)), features_(std::move(features)) {}

std::shared_ptr<const Layout> SamplesLayout::open(hid_t file, const std::string& path,
                                                  const Config& config) {
  FileSchema s;
  s.path = path;
  s.layout = kSamplesName;
  s.classification = config.model.task == Task::kClassification;
  DatasetMeta features = schema::require(file, path, config.data.names.features, "features");
  schema::requireRank(path, features, 2, 3, "[N, T, F] or [N, F]");
  schema::requireNumeric(path, features);
  s.numSamples = features.info.rows();
  schema::readTargets(s, file, config, features);
  schema::readTimestamps(s, file, config, features);
  return std::shared_ptr<const Layout>(new SamplesLayout(std::move(s), std::move(features)));
}

void SamplesLayout::describe(DataInfo& info) const {
  Layout::describe(info);
  const auto& dims = features_.info.dims;
  info.inputs = {{"features", windowed() ? dims[1] : 0, dims.back()}};
}

// Consecutive samples of a [N, T, F] file are usually windows that slide by one row.
NextStart SamplesLayout::oneWindowEmbargo(IndexReader& /*index*/) const {
  return fixedGap(windowed() ? features_.dim(1) : 0);
}

StorePlan SamplesLayout::planStore(SampleRange samples, DType residentDtype,
                                   IndexReader& /*index*/) const {
  StorePlan plan;
  plan.samples = samples;
  ReadSpec features;
  features.path = features_.path;
  features.rows = {samples.begin, samples.end};
  features.shape = withRows(samples.size(), features_.info.dims);
  features.type = residentFloatType(residentDtype);
  plan.reads = {features, targetsRead(samples)};
  return plan;
}

Batch SamplesLayout::gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
                            at::ScalarType inputType) const {
  Batch batch;
  batch.inputs.push_back(
      store[kFeatures].index_select(0, local).to(inputType));  // [B, T, F] / [B, F]
  batch.targets = store[kTargets].index_select(0, local);
  return batch;
}

}  // namespace mb::data
