#pragma once
// The graphs layout's arrays as the graph tools build them up, graph by graph, and their writing
// to a file (docs/data-format.md "graphs"). Shared by `megabatch data graphs` (GraphsJsonl.cpp)
// and `megabatch data synth-graphs` (SynthGraphs.cpp).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/tools/Tools.h"

namespace mb::data {

// Everything the layout stores, built up graph by graph.
struct GraphArrays {
  std::vector<std::int64_t> nodeOffsets{0}, edgeOffsets{0};
  std::int64_t featureWidth = -1;  // F; -1: no /node_features
  std::vector<float> features;     // [N_nodes * F]
  bool hasTypes = false;
  std::vector<std::int32_t> types;             // [N_nodes]
  std::vector<std::string> typeNames;          // vocabulary: type id -> name
  std::vector<std::int64_t> sources, targets;  // [E] local ids
  std::int64_t edgeWidth = -1;                 // F_e; -1: no /edge_features
  std::vector<float> edgeFeatures;             // [E * F_e]
  std::vector<std::string> ids;                // [G]
  bool classification = true;
  std::vector<std::int64_t> classes;    // [G] (classification)
  std::vector<std::string> classNames;  // when labels were names
  std::int64_t labelWidth = 0;          // regression: 0 = [G], K = [G, K]
  std::vector<float> values;            // [G * max(K, 1)] (regression)

  std::int64_t graphs() const { return static_cast<std::int64_t>(ids.size()); }
};

// Writes `out` through OUT.tmp and a rename: a failure leaves no file (nothing half written).
void writeGraphsFile(const std::string& out, const GraphArrays& a, const WriteSettings& write,
                     const std::vector<std::pair<std::string, std::string>>& attributes);
// The counts of `a` (graphs, nodes, edges, inputs, task, graphs per class) into `report`.
void fillReport(GraphsReport& report, const GraphArrays& a);
// The graphs of `a` in the order `order` (graph indices).
GraphArrays reorder(const GraphArrays& a, const std::vector<std::int64_t>& order);

}  // namespace mb::data
