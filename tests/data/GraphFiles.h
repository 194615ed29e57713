#pragma once
// Small graph files (data.layout = graphs) for the unit tests. Values are unique per node and
// edge, so a wrong gather cannot match the file.
#include <string>
#include <vector>

#include <ATen/Functions.h>

#include "common/Hdf5.h"
#include "config/Config.h"

namespace mb::test {

struct GraphSpec {
  std::int64_t graphs = 60;
  std::int64_t classes = 3;
  bool sortedLabels = true;  // labels grouped by class in the file (splits then leave holes)
  std::int64_t featureWidth = 2;
  bool nodeTypes = true;     // also /node_type (vocab 5)
  bool edgeFeatures = true;  // /edge_features [E, 1]
};

// Graph g has 2 + g % 5 nodes (so sizes vary), a path 0-1-...-(n-1) stored both ways plus an
// edge (n-1) -> 0. node_features[row] = [row, -row - 0.5]; node_type = row % 5;
// edge_features[e] = [e + 0.25]; label = class of g; graph_id = 1000 + g.
inline void writeGraphsFile(const std::string& path, const GraphSpec& spec) {
  std::vector<std::int64_t> nodeOffsets{0}, edgeOffsets{0}, sources, targets, labels, ids;
  for (std::int64_t g = 0; g < spec.graphs; ++g) {
    const std::int64_t n = 2 + g % 5;
    for (std::int64_t i = 0; i + 1 < n; ++i) {
      sources.insert(sources.end(), {i, i + 1});
      targets.insert(targets.end(), {i + 1, i});
    }
    sources.push_back(n - 1);
    targets.push_back(0);
    nodeOffsets.push_back(nodeOffsets.back() + n);
    edgeOffsets.push_back(static_cast<std::int64_t>(sources.size()));
    labels.push_back(spec.sortedLabels ? g * spec.classes / spec.graphs : g % spec.classes);
    ids.push_back(1000 + g);
  }
  const std::int64_t nodes = nodeOffsets.back();
  const auto edges = static_cast<std::int64_t>(sources.size());
  auto longs = [](const std::vector<std::int64_t>& v) { return at::tensor(v, at::kLong); };
  h5::Handle file = h5::createFile(path, false, ExitCode::kFailure);
  const h5::WriteOptions plain;
  h5::writeTensor(file.get(), "node_offsets", longs(nodeOffsets), plain, ExitCode::kFailure);
  h5::writeTensor(file.get(), "edge_offsets", longs(edgeOffsets), plain, ExitCode::kFailure);
  at::Tensor row = at::arange(nodes, at::kFloat).unsqueeze(1);
  if (spec.featureWidth > 0)
    h5::writeTensor(file.get(), "node_features", at::cat({row, -row - 0.5}, 1), plain,
                    ExitCode::kFailure);
  if (spec.nodeTypes) {
    h5::writeTensor(file.get(), "node_type", at::arange(nodes, at::kInt).remainder(5), plain,
                    ExitCode::kFailure);
    h5::Handle types = h5::openDataset(file.get(), "node_type", ExitCode::kFailure);
    h5::writeAttribute(types.get(), "vocab_size", std::int64_t{5}, ExitCode::kFailure);
  }
  h5::writeTensor(file.get(), "edge_index", at::stack({longs(sources), longs(targets)}), plain,
                  ExitCode::kFailure);
  if (spec.edgeFeatures)
    h5::writeTensor(file.get(), "edge_features",
                    at::arange(edges, at::kFloat).add(0.25).unsqueeze(1), plain,
                    ExitCode::kFailure);
  h5::writeTensor(file.get(), "label", longs(labels), plain, ExitCode::kFailure);
  h5::writeTensor(file.get(), "graph_id", longs(ids), plain, ExitCode::kFailure);
}

inline Config graphsConfig(const std::string& path) {
  Config c;
  c.data.path = path;
  c.data.layout = "graphs";
  c.data.canonicalShards = 4;
  c.data.residency = Residency::kHost;
  c.model.kind = "gnn";
  c.model.task = Task::kClassification;
  c.train.globalBatch = 8;
  return c;
}

}  // namespace mb::test
