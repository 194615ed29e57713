// The graphs layout's stores: which nodes and edges a store of graphs reads, the checks on what
// was read, and the gather of a batch of graphs (the file's checks and open() are in
// GraphsLayout.cpp).
#include "data/layouts/GraphsLayout.h"

#include <algorithm>
#include <optional>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "data/pipeline/ValueScan.h"

namespace mb::data {
std::vector<std::int64_t> GraphsLayout::graphsOf(SampleRange samples) const {
  std::vector<std::int64_t> graphs(view_.begin() + samples.begin, view_.begin() + samples.end);
  if (!std::is_sorted(graphs.begin(), graphs.end()))
    throw RuntimeError("graphs layout: samples [" + std::to_string(samples.begin) + ", " +
                       std::to_string(samples.end) +
                       ") cross a split of the view (Note [Graph splits]); stores never do");
  return graphs;
}

std::int64_t GraphsLayout::graphOfNode(std::int64_t row) const {
  auto it = std::upper_bound(nodeOffsets_.begin(), nodeOffsets_.end(), row);
  return static_cast<std::int64_t>(it - nodeOffsets_.begin()) - 1;
}

std::int64_t GraphsLayout::graphOfEdge(std::int64_t column) const {
  auto it = std::upper_bound(edgeOffsets_.begin(), edgeOffsets_.end(), column);
  return static_cast<std::int64_t>(it - edgeOffsets_.begin()) - 1;
}

// Reads, in this order: node features, node types, edge index (columns), edge features, labels;
// each the span from the store's first graph to its last (Note [Graph splits]).
StorePlan GraphsLayout::planStore(SampleRange samples, DType residentDtype,
                                  IndexReader& /*index*/) const {
  StorePlan plan;
  plan.samples = samples;
  std::vector<std::int64_t> graphs = graphsOf(samples);
  ItemRange span, nodeRows, edgeColumns;
  if (!graphs.empty()) {
    span = {graphs.front(), graphs.back() + 1};
    nodeRows = {nodeOffsets_[span.begin], nodeOffsets_[span.end]};
    edgeColumns = {edgeOffsets_[span.begin], edgeOffsets_[span.end]};
  }
  auto add = [&](std::size_t part, const DatasetMeta& d, ItemRange rows,
                 std::vector<std::int64_t> shape, at::ScalarType type, int axis) {
    ReadSpec read;
    read.part = part;
    read.path = d.path;
    read.rows = rows;
    read.shape = std::move(shape);
    read.type = type;
    read.axis = axis;
    plan.reads.push_back(std::move(read));
  };
  const at::ScalarType floats = residentFloatType(residentDtype);
  if (d_.nodeFeatures.present())
    add(kNodeFeatures, d_.nodeFeatures, nodeRows,
        withRows(nodeRows.size(), d_.nodeFeatures.info.dims), floats, 0);
  if (d_.nodeTypes.present())
    add(kNodeTypes, d_.nodeTypes, nodeRows, {nodeRows.size()}, at::kInt, 0);
  add(kEdgeIndex, d_.edgeIndex, edgeColumns, {2, edgeColumns.size()}, at::kInt, 1);
  if (d_.edgeFeatures.present())
    add(kEdgeFeatures, d_.edgeFeatures, edgeColumns,
        withRows(edgeColumns.size(), d_.edgeFeatures.info.dims), floats, 0);
  plan.reads.push_back(targetsRead({span.begin, span.end}));
  return plan;
}

void GraphsLayout::checkInput(const ReadSpec& read, const at::Tensor& values) const {
  switch (read.part) {
    case kNodeFeatures:
      requireFinite(schema_, read, values, [this](std::int64_t row) {
        return "node row " + std::to_string(row) + " (graph " + std::to_string(graphOfNode(row)) +
               ")";
      });
      return;
    case kEdgeFeatures:
      requireFinite(schema_, read, values, [this](std::int64_t row) {
        return "edge " + std::to_string(row) + " (graph " + std::to_string(graphOfEdge(row)) + ")";
      });
      return;
    case kNodeTypes: {
      std::int64_t row = firstOutOfRangeRow(values, 0, vocabSize_);
      if (row < 0) return;
      std::int64_t fileRow = read.rows.begin + row;
      throw DataError(describeDataset(schema_, d_.nodeTypes) + ": node type " +
                          std::to_string(values[row].item<std::int64_t>()) + " at node row " +
                          std::to_string(fileRow) + " (graph " +
                          std::to_string(graphOfNode(fileRow)) +
                          ") is outside [0, vocab_size = " + std::to_string(vocabSize_) + ")",
                      "node types must be 0..vocab_size-1; raise the attribute vocab_size");
    }
    case kEdgeIndex:
      checkEdges(read, values);
      return;
    default:
      return;
  }
}

// Every edge's endpoints are local ids of its own graph: 0 <= id < nodes of that graph.
void GraphsLayout::checkEdges(const ReadSpec& read, const at::Tensor& edges) const {
  if (read.rows.size() == 0) return;
  const std::int64_t first = graphOfEdge(read.rows.begin);
  const std::int64_t last = graphOfEdge(read.rows.end - 1);
  std::vector<std::int64_t> nodes, counts;
  for (std::int64_t g = first; g <= last; ++g) {
    nodes.push_back(nodeOffsets_[g + 1] - nodeOffsets_[g]);
    counts.push_back(edgeOffsets_[g + 1] - edgeOffsets_[g]);
  }
  at::Tensor limit =
      at::repeat_interleave(at::tensor(nodes, at::kLong), at::tensor(counts, at::kLong))
          .to(edges.device());  // [columns] nodes of each edge's graph
  at::Tensor bad = edges.lt(0).logical_or(edges.ge(limit.unsqueeze(0))).any(0);  // [columns]
  if (!bad.any().item<bool>()) return;
  const std::int64_t column = bad.nonzero()[0][0].item<std::int64_t>();
  const std::int64_t fileColumn = read.rows.begin + column;
  const std::int64_t graph = graphOfEdge(fileColumn);
  at::Tensor pair = edges.select(1, column).to(at::kCPU, at::kLong);
  const std::int64_t size = nodeOffsets_[graph + 1] - nodeOffsets_[graph];
  throw DataError(describeDataset(schema_, d_.edgeIndex) + ": edge " +
                      std::to_string(fileColumn - edgeOffsets_[graph]) + " of graph " +
                      std::to_string(graph) + " (column " + std::to_string(fileColumn) + ") is (" +
                      std::to_string(pair[0].item<std::int64_t>()) + ", " +
                      std::to_string(pair[1].item<std::int64_t>()) + "), but the graph has " +
                      std::to_string(size) + " nodes (local ids 0.." + std::to_string(size - 1) +
                      ")",
                  "edge_index holds node ids local to each graph (0 = the graph's first node)");
}

// Drops the span's graphs that belong to other stores and appends the store's own offsets and
// file graph numbers (Note [Graph gather]).
std::vector<at::Tensor> GraphsLayout::prepareStore(const StorePlan& plan,
                                                   std::vector<at::Tensor> tensors) const {
  const std::vector<std::int64_t> graphs = graphsOf(plan.samples);
  const auto n = static_cast<std::int64_t>(graphs.size());
  const c10::Device device = tensors.at(slots_.labels).device();
  const std::int64_t first = graphs.empty() ? 0 : graphs.front();
  const bool whole = graphs.empty() || graphs.back() + 1 - first == n;
  std::vector<std::int64_t> nodeOffsets{0}, edgeOffsets{0}, keepGraphs, keepNodes, keepEdges;
  for (std::int64_t g : graphs) {
    const std::int64_t nodes = nodeOffsets_[g + 1] - nodeOffsets_[g];
    const std::int64_t edges = edgeOffsets_[g + 1] - edgeOffsets_[g];
    nodeOffsets.push_back(nodeOffsets.back() + nodes);
    edgeOffsets.push_back(edgeOffsets.back() + edges);
    if (whole) continue;
    keepGraphs.push_back(g - first);
    for (std::int64_t r = 0; r < nodes; ++r)
      keepNodes.push_back(nodeOffsets_[g] - nodeOffsets_[first] + r);
    for (std::int64_t e = 0; e < edges; ++e)
      keepEdges.push_back(edgeOffsets_[g] - edgeOffsets_[first] + e);
  }
  auto upload = [&](const std::vector<std::int64_t>& values) {
    return at::tensor(values, at::kLong).to(device);
  };
  auto keep = [&](int slot, std::int64_t dim, const std::vector<std::int64_t>& rows) {
    if (slot >= 0) tensors[slot] = tensors[slot].index_select(dim, upload(rows));
  };
  if (!whole) {
    keep(slots_.nodeFeatures, 0, keepNodes);
    keep(slots_.nodeTypes, 0, keepNodes);
    keep(slots_.edgeIndex, 1, keepEdges);
    keep(slots_.edgeFeatures, 0, keepEdges);
    keep(slots_.labels, 0, keepGraphs);
  }
  tensors.push_back(upload(nodeOffsets));  // slots_.nodeOffsets
  tensors.push_back(upload(edgeOffsets));  // slots_.edgeOffsets
  tensors.push_back(upload(graphs));       // slots_.graphIds
  return tensors;
}

namespace {

// Rows start[i] .. start[i] + count[i] - 1 of every i, concatenated ([total] = sum of counts),
// the i of each ([total]), and where each i's rows begin in the result ([B]).
struct Ranges {
  at::Tensor rows;
  at::Tensor owner;
  at::Tensor base;
};

Ranges concatenateRanges(const at::Tensor& start, const at::Tensor& count, std::int64_t total) {
  Ranges r;
  r.base = count.cumsum(0) - count;
  // The repeats-only overload (arange(B) repeated count times); a plain int64 second argument
  // would pick the (self, int repeats) overload instead.
  r.owner = at::repeat_interleave(count, c10::optional<std::int64_t>(total));
  r.rows = start.index_select(0, r.owner) + at::arange(total, count.options()) -
           r.base.index_select(0, r.owner);
  return r;
}

}  // namespace

Batch GraphsLayout::gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
                           at::ScalarType inputType) const {
  const at::Tensor& nodeOffsets = store[slots_.nodeOffsets];
  const at::Tensor& edgeOffsets = store[slots_.edgeOffsets];
  at::Tensor next = local + 1;
  at::Tensor nodeStart = nodeOffsets.index_select(0, local);  // [B]
  at::Tensor nodeCount = nodeOffsets.index_select(0, next) - nodeStart;
  at::Tensor edgeStart = edgeOffsets.index_select(0, local);
  at::Tensor edgeCount = edgeOffsets.index_select(0, next) - edgeStart;
  at::Tensor totals = at::stack({nodeCount.sum(), edgeCount.sum()}).to(at::kCPU);  // one read
  const std::int64_t totalNodes = totals[0].item<std::int64_t>();
  const std::int64_t totalEdges = totals[1].item<std::int64_t>();
  Ranges nodes = concatenateRanges(nodeStart, nodeCount, totalNodes);
  Ranges edges = concatenateRanges(edgeStart, edgeCount, totalEdges);

  Batch batch;
  if (slots_.nodeFeatures >= 0)
    batch.nodeFeatures = store[slots_.nodeFeatures].index_select(0, nodes.rows).to(inputType);
  if (slots_.nodeTypes >= 0)
    batch.nodeTypes = store[slots_.nodeTypes].index_select(0, nodes.rows).to(at::kLong);
  batch.edgeIndex = store[slots_.edgeIndex].index_select(1, edges.rows).to(at::kLong) +
                    nodes.base.index_select(0, edges.owner).unsqueeze(0);  // [2, E] batch rows
  if (slots_.edgeFeatures >= 0)
    batch.edgeFeatures = store[slots_.edgeFeatures].index_select(0, edges.rows).to(inputType);
  batch.nodeGraph = nodes.owner;
  batch.targets = store[slots_.labels].index_select(0, local);
  batch.sampleIndex = store[slots_.graphIds].index_select(0, local);
  return batch;
}

// Nodes + edges of each stored graph, from the store's offsets.
at::Tensor GraphsLayout::sampleWeights(const std::vector<at::Tensor>& store) const {
  auto counts = [&](int slot) {
    const at::Tensor offsets = store[static_cast<std::size_t>(slot)].cpu();
    return offsets.slice(0, 1) - offsets.slice(0, 0, -1);
  };
  return counts(slots_.nodeOffsets) + counts(slots_.edgeOffsets);
}

std::vector<std::int64_t> GraphsLayout::sampleCosts(SampleRange samples) const {
  std::vector<std::int64_t> costs;
  costs.reserve(static_cast<std::size_t>(samples.size()));
  for (std::int64_t i = samples.begin; i < samples.end; ++i) {
    const std::int64_t g = view_[i];
    costs.push_back(nodeOffsets_[g + 1] - nodeOffsets_[g]);
  }
  return costs;
}

}  // namespace mb::data
