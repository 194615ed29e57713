#include "data/tools/GraphArrays.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "data/tools/ToolOutput.h"

namespace mb::data {
namespace {

template <class T>
at::Tensor tensorOf(const std::vector<T>& values, at::ScalarType type,
                    std::vector<std::int64_t> shape) {
  at::Tensor out = at::empty(shape, type);
  std::copy(values.begin(), values.end(), out.data_ptr<T>());
  return out;
}

void writeDatasets(hid_t file, const GraphArrays& a, const h5::WriteOptions& options) {
  constexpr ExitCode code = ExitCode::kFailure;
  const std::int64_t graphs = a.graphs();
  const std::int64_t nodes = a.nodeOffsets.back();
  const std::int64_t edges = a.edgeOffsets.back();
  h5::writeTensor(file, "node_offsets", tensorOf(a.nodeOffsets, at::kLong, {graphs + 1}), options,
                  code);
  h5::writeTensor(file, "edge_offsets", tensorOf(a.edgeOffsets, at::kLong, {graphs + 1}), options,
                  code);
  if (a.featureWidth > 0)
    h5::writeTensor(file, "node_features",
                    tensorOf(a.features, at::kFloat, {nodes, a.featureWidth}), options, code);
  if (a.hasTypes) {
    h5::writeTensor(file, "node_type", tensorOf(a.types, at::kInt, {nodes}), options, code);
    h5::Handle types = h5::openDataset(file, "node_type", code);
    h5::writeAttribute(types.get(), "vocab_size", static_cast<std::int64_t>(a.typeNames.size()),
                       code);
    h5::writeTensor(file, "node_type_names", textRows(a.typeNames), {}, code);
  }
  std::vector<std::int64_t> index(a.sources);
  index.insert(index.end(), a.targets.begin(), a.targets.end());
  h5::writeTensor(file, "edge_index", tensorOf(index, at::kLong, {2, edges}), options, code);
  if (a.edgeWidth > 0)
    h5::writeTensor(file, "edge_features",
                    tensorOf(a.edgeFeatures, at::kFloat, {edges, a.edgeWidth}), options, code);
  if (a.classification) {
    h5::writeTensor(file, "label", tensorOf(a.classes, at::kLong, {graphs}), options, code);
    if (!a.classNames.empty())
      h5::writeTensor(file, "label_names", textRows(a.classNames), {}, code);
  } else {
    std::vector<std::int64_t> shape{graphs};
    if (a.labelWidth > 0) shape.push_back(a.labelWidth);
    h5::writeTensor(file, "label", tensorOf(a.values, at::kFloat, shape), options, code);
  }
  h5::writeTensor(file, "graph_id", textRows(a.ids), options, code);
  h5::writeAttribute(file, "layout", std::string("graphs"), code);
}

}  // namespace

void writeGraphsFile(const std::string& out, const GraphArrays& a, const WriteSettings& write,
                     const std::vector<std::pair<std::string, std::string>>& attributes) {
  const std::string tmp = out + ".tmp";
  try {
    constexpr ExitCode code = ExitCode::kFailure;
    h5::Handle file = h5::createFile(tmp, false, code);
    writeDatasets(file.get(), a, writeOptions(write));
    for (const auto& [name, value] : attributes)
      h5::writeAttribute(file.get(), name, value, code);
    file.close(code, tmp);
    std::filesystem::rename(tmp, out);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
}

void fillReport(GraphsReport& report, const GraphArrays& a) {
  report.graphs = a.graphs();
  report.nodes = a.nodeOffsets.back();
  report.edges = a.edgeOffsets.back();
  report.nodeFeatures = std::max<std::int64_t>(0, a.featureWidth);
  report.nodeTypes = static_cast<std::int64_t>(a.typeNames.size());
  report.edgeFeatures = std::max<std::int64_t>(0, a.edgeWidth);
  report.task = a.classification ? "classification" : "regression";
  if (a.classification) {
    for (std::int64_t c : a.classes) {
      if (c >= static_cast<std::int64_t>(report.classCounts.size()))
        report.classCounts.resize(static_cast<std::size_t>(c + 1), 0);
      ++report.classCounts[c];
    }
  }
  report.classNames = a.classNames;
}

GraphArrays reorder(const GraphArrays& a, const std::vector<std::int64_t>& order) {
  GraphArrays b;
  b.featureWidth = a.featureWidth;
  b.hasTypes = a.hasTypes;
  b.typeNames = a.typeNames;
  b.edgeWidth = a.edgeWidth;
  b.classification = a.classification;
  b.classNames = a.classNames;
  b.labelWidth = a.labelWidth;
  const std::int64_t labelValues = std::max<std::int64_t>(a.labelWidth, 1);
  for (std::int64_t g : order) {
    b.ids.push_back(a.ids[g]);
    const std::int64_t n0 = a.nodeOffsets[g], n1 = a.nodeOffsets[g + 1];
    const std::int64_t e0 = a.edgeOffsets[g], e1 = a.edgeOffsets[g + 1];
    b.nodeOffsets.push_back(b.nodeOffsets.back() + n1 - n0);
    b.edgeOffsets.push_back(b.edgeOffsets.back() + e1 - e0);
    if (a.featureWidth > 0)
      b.features.insert(b.features.end(), a.features.begin() + n0 * a.featureWidth,
                        a.features.begin() + n1 * a.featureWidth);
    if (a.hasTypes) b.types.insert(b.types.end(), a.types.begin() + n0, a.types.begin() + n1);
    b.sources.insert(b.sources.end(), a.sources.begin() + e0, a.sources.begin() + e1);
    b.targets.insert(b.targets.end(), a.targets.begin() + e0, a.targets.begin() + e1);
    if (a.edgeWidth > 0)
      b.edgeFeatures.insert(b.edgeFeatures.end(), a.edgeFeatures.begin() + e0 * a.edgeWidth,
                            a.edgeFeatures.begin() + e1 * a.edgeWidth);
    if (a.classification) {
      b.classes.push_back(a.classes[g]);
    } else {
      b.values.insert(b.values.end(), a.values.begin() + g * labelValues,
                      a.values.begin() + (g + 1) * labelValues);
    }
  }
  return b;
}

std::string GraphsReport::summary() const {
  std::ostringstream text;
  text << graphs << " graphs, " << nodes << " nodes, " << edges << " edges; node inputs: ";
  if (nodeFeatures > 0) text << nodeFeatures << " features";
  if (nodeFeatures > 0 && nodeTypes > 0) text << " + ";
  if (nodeTypes > 0) text << nodeTypes << " node types";
  if (edgeFeatures > 0) text << "; " << edgeFeatures << " edge features";
  text << "; " << task;
  if (!classCounts.empty()) {
    text << ", graphs per class:";
    for (std::size_t c = 0; c < classCounts.size(); ++c)
      text << " " << c << (c < classNames.size() ? "=" + classNames[c] : "") << ": "
           << classCounts[c];
  }
  if (skipped > 0) text << "\nskipped " << skipped << " bad line(s) (--skip-bad)";
  for (const auto& note : notes)
    text << "\n  " << note;
  return text.str();
}

}  // namespace mb::data
