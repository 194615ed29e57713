#include "data/layouts/GraphsLayout.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include <ATen/Functions.h>

#include "common/Error.h"

namespace mb::data {
namespace {

constexpr const char* kGraphsName = "graphs";
constexpr const char* kOffsetsHint =
    "offsets are cumulative counts: [0, n_0, n_0 + n_1, ..., total] (docs/data-format.md, graphs)";

std::optional<std::string> checkGraphsConfig(const Config& c) {
  if (c.data.residency == Residency::kStream)
    return "data.layout = graphs cannot use data.residency = stream (a batch of graphs is not a "
           "set of rows that streamed chunks can be merged from): set data.residency = host or "
           "device; graph datasets are resident";
  if (c.data.split.embargo > 0)
    return "data.layout = graphs: graphs are independent samples, so data.split.embargo = " +
           std::to_string(c.data.split.embargo) + " means nothing: set it to -1 (or 0)";
  return std::nullopt;
}

std::optional<std::string> inspectGraphs(hid_t /*file*/,
                                         const std::vector<ListedDataset>& datasets) {
  auto find = [&](const std::string& name) -> const ListedDataset* {
    for (const auto& d : datasets) {
      if (d.path == name) return &d;
    }
    return nullptr;
  };
  const ListedDataset* offsets = find("node_offsets");
  if (offsets == nullptr) return std::nullopt;
  std::string text = "layout: graphs, " + std::to_string(offsets->info.rows() - 1) + " graphs";
  if (const ListedDataset* features = find("node_features"))
    text += ", node_features " + schema::shapeText(features->info.dims);
  if (const ListedDataset* types = find("node_type"))
    text += ", node_type " + schema::shapeText(types->info.dims);
  if (const ListedDataset* edges = find("edge_index"))
    text += ", edge_index " + schema::shapeText(edges->info.dims);
  return text + "\nsamples: " + std::to_string(offsets->info.rows() - 1) + " (graphs)";
}

std::vector<std::int64_t> readAll(hid_t file, const DatasetMeta& d) {
  at::Tensor t = h5::readTensor(file, d.path, ExitCode::kData, at::kLong).contiguous();
  return {t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + t.numel()};
}

// Offsets start at 0, never decrease (nodes: every graph has one), and end at `total`.
void checkOffsets(const std::string& path, const DatasetMeta& d,
                  const std::vector<std::int64_t>& offsets, std::int64_t total,
                  const std::string& totalName, bool nonEmpty) {
  const std::string where = schema::where(path, d.path);
  if (offsets.front() != 0)
    throw DataError(where + ": starts at " + std::to_string(offsets.front()) + ", expected 0",
                    kOffsetsHint);
  for (std::size_t g = 0; g + 1 < offsets.size(); ++g) {
    if (offsets[g + 1] < offsets[g])
      throw DataError(where + ": decreases at graph " + std::to_string(g) + " (" +
                          std::to_string(offsets[g]) + " then " + std::to_string(offsets[g + 1]) +
                          ")",
                      kOffsetsHint);
    if (nonEmpty && offsets[g + 1] == offsets[g])
      throw DataError(where + ": graph " + std::to_string(g) + " has no nodes (offsets " +
                          std::to_string(g) + " and " + std::to_string(g + 1) + " are both " +
                          std::to_string(offsets[g]) + ")",
                      "every graph needs at least one node: drop empty graphs");
  }
  if (offsets.back() != total)
    throw DataError(where + ": ends at " + std::to_string(offsets.back()) + ", but " + totalName +
                        " has " + std::to_string(total),
                    kOffsetsHint);
}

// A per-graph dataset has G rows (node_offsets has G + 1).
void requireGraphRows(const std::string& path, const DatasetMeta& d, std::int64_t graphs) {
  if (d.info.rows() != graphs)
    throw DataError(
        schema::where(path, d.path) + ": expected one row per graph, G = " +
            std::to_string(graphs) + " (/node_offsets holds G + 1 = " + std::to_string(graphs + 1) +
            "), found " + std::to_string(d.info.rows()) + " " + schema::shapeText(d.info.dims),
        "one label (and graph id) per graph, in the graphs' order");
}

std::int64_t readNodeTypeVocab(hid_t file, const std::string& path, const DatasetMeta& types) {
  h5::Handle dataset = h5::openDataset(file, types.path, ExitCode::kData);
  if (!h5::hasAttribute(dataset.get(), "vocab_size"))
    throw DataError(schema::where(path, types.path) + ": attribute vocab_size is missing",
                    "set it to the number of node types: f['node_type'].attrs['vocab_size'] = 12");
  std::int64_t vocab = h5::readIntAttribute(dataset.get(), "vocab_size", ExitCode::kData);
  if (vocab < 1 || vocab > (std::int64_t{1} << 31))
    throw DataError(schema::where(path, types.path) + ": vocab_size = " + std::to_string(vocab) +
                    " must be in [1, 2^31]");
  return vocab;
}

// A hash of up to 8 evenly spaced runs of 64 edge columns (the fingerprint's share of
// /edge_index: its rows are the whole edge list, too long to hash as rows).
std::string edgeHash(hid_t file, const DatasetMeta& edges) {
  h5::Handle dataset = h5::openDataset(file, edges.path, ExitCode::kData);
  const std::int64_t columns = edges.dim(1);
  const std::int64_t width = std::min<std::int64_t>(columns, 64);
  std::uint64_t hash = hashBytes("edges", 5);
  for (std::int64_t k = 0; k < 8 && width > 0; ++k) {
    std::int64_t begin = (columns - width) * k / 7;
    at::Tensor piece = at::empty({2, width}, at::kLong);
    h5::readRowsInto(dataset.get(), begin, begin + width, piece, ExitCode::kData,
                     schema::where(h5::fileNameOf(file), edges.path), H5P_DEFAULT, 1);
    hash = hashBytes(piece.data_ptr(), static_cast<std::size_t>(piece.numel() * 8), hash);
  }
  char text[40];
  std::snprintf(text, sizeof(text), "|edges=%016llx", static_cast<unsigned long long>(hash));
  return text;
}

// The view of Note [Graph splits] for the file's labels (classification) or the identity.
std::vector<std::int64_t> makeView(hid_t file, const FileSchema& s, const Config& config) {
  const std::int64_t graphs = s.numSamples;
  if (!s.classification) {
    std::vector<std::int64_t> identity(static_cast<std::size_t>(graphs));
    for (std::int64_t g = 0; g < graphs; ++g)
      identity[g] = g;
    return identity;
  }
  std::vector<std::int64_t> labels = readAll(file, s.targets);
  for (std::size_t g = 0; g < labels.size(); ++g) {
    if (labels[g] < 0)
      throw DataError(schema::where(s.path, s.targets.path) + ": class label " +
                          std::to_string(labels[g]) + " at graph " + std::to_string(g) +
                          " is negative",
                      "labels must be 0..classes-1");
  }
  // The loader cuts the same splits (Layout::oneWindowEmbargo is a gap of 0 here).
  auto splits = planSplits({0, graphs}, config.data.split,
                           fixedGap(std::max<std::int64_t>(0, config.data.split.embargo)), s.path);
  std::vector<std::int64_t> ends;
  for (const auto& range : splits) {
    ends.push_back(range.begin);
    ends.push_back(range.end);
  }
  ends.push_back(graphs);
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  if (!ends.empty() && ends.front() == 0) ends.erase(ends.begin());
  return GraphsLayout::stratifiedView(labels, ends);
}

}  // namespace

LayoutKind graphsLayoutKind() {
  LayoutKind kind;
  kind.name = kGraphsName;
  kind.hasTime = false;  // graphs carry no per-sample time
  kind.summary =
      "many small graphs (one sample each) in CSR form: /node_features or /node_type, "
      "/edge_index [2, E], /node_offsets and /edge_offsets [G+1], /label [G] or [G, K]";
  kind.marker = "/node_offsets";
  kind.open = GraphsLayout::open;
  kind.checkConfig = checkGraphsConfig;
  kind.inspect = inspectGraphs;
  return kind;
}

std::vector<std::int64_t> GraphsLayout::stratifiedView(const std::vector<std::int64_t>& labels,
                                                       const std::vector<std::int64_t>& blockEnds) {
  const auto graphs = static_cast<std::int64_t>(labels.size());
  std::int64_t classes = 0;
  for (std::int64_t label : labels)
    classes = std::max(classes, label + 1);
  std::vector<std::int64_t> perClass(static_cast<std::size_t>(classes), 0);
  struct Key {
    std::int64_t index, count, label, graph;  // k-th of its class, of n_c; key (2k+1)/(2 n_c)
  };
  std::vector<Key> keys;
  keys.reserve(labels.size());
  for (std::int64_t g = 0; g < graphs; ++g)
    keys.push_back({perClass[labels[g]]++, 0, labels[g], g});
  for (auto& key : keys)
    key.count = perClass[key.label];
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    __int128 left = static_cast<__int128>(2 * a.index + 1) * b.count;
    __int128 right = static_cast<__int128>(2 * b.index + 1) * a.count;
    return left != right ? left < right : a.label < b.label;
  });
  std::vector<std::int64_t> view(labels.size());
  for (std::int64_t p = 0; p < graphs; ++p)
    view[p] = keys[p].graph;
  std::int64_t begin = 0;
  for (std::int64_t end : blockEnds) {
    std::sort(view.begin() + begin, view.begin() + end);
    begin = end;
  }
  return view;
}

GraphsLayout::GraphsLayout(FileSchema schema, Datasets datasets,
                           std::vector<std::int64_t> nodeOffsets,
                           std::vector<std::int64_t> edgeOffsets, std::vector<std::int64_t> view,
                           std::int64_t vocabSize, std::string fingerprintDetail)
    : Layout(std::move(schema)),
      d_(std::move(datasets)),
      nodeOffsets_(std::move(nodeOffsets)),
      edgeOffsets_(std::move(edgeOffsets)),
      view_(std::move(view)),
      vocabSize_(vocabSize),
      fingerprintDetail_(std::move(fingerprintDetail)) {
  int slot = 0;
  if (d_.nodeFeatures.present()) slots_.nodeFeatures = slot++;
  if (d_.nodeTypes.present()) slots_.nodeTypes = slot++;
  slots_.edgeIndex = slot++;
  if (d_.edgeFeatures.present()) slots_.edgeFeatures = slot++;
  slots_.labels = slot++;
  slots_.nodeOffsets = slot++;
  slots_.edgeOffsets = slot++;
  slots_.graphIds = slot++;
}

std::shared_ptr<const Layout> GraphsLayout::open(hid_t file, const std::string& path,
                                                 const Config& config) {
  FileSchema s;
  s.path = path;
  s.layout = kGraphsName;
  s.classification = config.model.task == Task::kClassification;
  Datasets d;
  d.nodeOffsets = schema::require(file, path, "node_offsets", "node_offsets");
  schema::requireRank(path, d.nodeOffsets, 1, 1, "[G+1]");
  schema::requireInteger(path, d.nodeOffsets, "cumulative node counts");
  if (d.nodeOffsets.info.rows() < 2)
    throw DataError(schema::where(path, d.nodeOffsets.path) + ": holds " +
                        std::to_string(d.nodeOffsets.info.rows()) +
                        " offset(s); a file of G >= 1 graphs holds G + 1",
                    kOffsetsHint);
  s.numSamples = d.nodeOffsets.info.rows() - 1;
  d.edgeOffsets = schema::require(file, path, "edge_offsets", "edge_offsets");
  schema::requireRank(path, d.edgeOffsets, 1, 1, "[G+1]");
  schema::requireInteger(path, d.edgeOffsets, "cumulative edge counts");
  schema::requireRows(path, d.edgeOffsets, s.numSamples + 1, d.nodeOffsets);

  d.nodeFeatures = schema::optional(file, path, "node_features", "node features");
  d.nodeTypes = schema::optional(file, path, "node_type", "categorical node types");
  if (!d.nodeFeatures.present() && !d.nodeTypes.present())
    throw DataError(
        path + ": the graphs have no node inputs: neither /node_features [N_nodes, F] " +
            "nor /node_type [N_nodes] is there" + schema::siblings(file, "node_features"),
        schema::kFormatHint);
  std::int64_t nodes = 0;
  if (d.nodeFeatures.present()) {
    schema::requireRank(path, d.nodeFeatures, 2, 2, "[N_nodes, F]");
    schema::requireNumeric(path, d.nodeFeatures);
    nodes = d.nodeFeatures.info.rows();
  }
  std::int64_t vocab = 0;
  if (d.nodeTypes.present()) {
    schema::requireRank(path, d.nodeTypes, 1, 1, "[N_nodes]");
    schema::requireInteger(path, d.nodeTypes, "node type ids 0..vocab_size-1");
    if (d.nodeFeatures.present()) schema::requireRows(path, d.nodeTypes, nodes, d.nodeFeatures);
    nodes = d.nodeTypes.info.rows();
    vocab = readNodeTypeVocab(file, path, d.nodeTypes);
  }
  d.edgeIndex = schema::require(file, path, "edge_index", "edge_index");
  schema::requireRank(path, d.edgeIndex, 2, 2, "[2, E]");
  schema::requireInteger(path, d.edgeIndex, "local node ids");
  if (d.edgeIndex.dim(0) != 2)
    throw DataError(schema::where(path, d.edgeIndex.path) +
                        ": expected shape [2, E] (sources in row 0, targets in row 1), found " +
                        schema::shapeText(d.edgeIndex.info.dims),
                    "an [E, 2] edge list is the transpose: write f['edge_index'] = edges.T");
  const std::int64_t edges = d.edgeIndex.dim(1);
  d.edgeFeatures = schema::optional(file, path, "edge_features", "edge features");
  if (d.edgeFeatures.present()) {
    schema::requireRank(path, d.edgeFeatures, 2, 2, "[E, F_e]");
    schema::requireNumeric(path, d.edgeFeatures);
    if (d.edgeFeatures.info.rows() != edges)
      throw DataError(
          schema::where(path, d.edgeFeatures.path) + ": expected E = " + std::to_string(edges) +
              " rows (one per column of /edge_index " + schema::shapeText(d.edgeIndex.info.dims) +
              "), found " + schema::shapeText(d.edgeFeatures.info.dims),
          "one edge feature row per edge");
  }
  s.targets = schema::require(file, path, "label", "graph labels");
  schema::requireRank(path, s.targets, 1, 2, "[G] or [G, K]");
  schema::requireNumeric(path, s.targets);
  requireGraphRows(path, s.targets, s.numSamples);
  if (s.classification) {
    if (s.targets.info.typeClass != H5T_INTEGER)
      throw DataError(schema::where(path, s.targets.path) +
                          ": model.task = classification needs integer class labels, found " +
                          s.targets.info.typeName(),
                      "store labels as integers 0..classes-1, or use model.task = regression");
    schema::requireRank(path, s.targets, 1, 1, "[G] (one label per graph)");
  }
  d.graphIds = schema::optional(file, path, "graph_id", "graph ids");
  if (d.graphIds.present()) {
    schema::requireRank(path, d.graphIds, 1, 2, "[G] or [G, L] (NUL-padded text)");
    schema::requireInteger(path, d.graphIds, "integer ids, or uint8 text rows");
    requireGraphRows(path, d.graphIds, s.numSamples);
  }

  std::vector<std::int64_t> nodeOffsets = readAll(file, d.nodeOffsets);
  checkOffsets(path, d.nodeOffsets, nodeOffsets, nodes,
               d.nodeFeatures.present() ? "/node_features" : "/node_type", true);
  std::vector<std::int64_t> edgeOffsets = readAll(file, d.edgeOffsets);
  checkOffsets(path, d.edgeOffsets, edgeOffsets, edges, "/edge_index (columns)", false);
  std::vector<std::int64_t> view = makeView(file, s, config);
  std::string detail = edgeHash(file, d.edgeIndex);
  return std::shared_ptr<const Layout>(
      new GraphsLayout(std::move(s), std::move(d), std::move(nodeOffsets), std::move(edgeOffsets),
                       std::move(view), vocab, std::move(detail)));
}

void GraphsLayout::describe(DataInfo& info) const {
  Layout::describe(info);
  info.inputs.clear();
  if (d_.nodeFeatures.present())
    info.inputs.push_back({"node_features", 0, d_.nodeFeatures.dim(1)});
  if (d_.nodeTypes.present()) info.inputs.push_back({"node_types", 0, 0});
  if (d_.edgeFeatures.present())
    info.inputs.push_back({"edge_features", 0, d_.edgeFeatures.dim(1)});
  info.vocabSize = vocabSize_;
  info.sampleIdDataset = d_.graphIds.path;
}

std::vector<DatasetMeta> GraphsLayout::contentDatasets() const {
  return {d_.nodeOffsets, d_.edgeOffsets, d_.nodeFeatures, d_.nodeTypes, d_.edgeFeatures};
}

NextStart GraphsLayout::oneWindowEmbargo(IndexReader& /*index*/) const {
  return fixedGap(0);  // graphs share no rows
}

}  // namespace mb::data
