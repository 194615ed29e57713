#pragma once
// data.layout = graphs: many small graphs per file, in CSR form (docs/data-format.md "graphs").
//
//   /node_offsets   [G+1] int    graph g's nodes are rows node_offsets[g] .. node_offsets[g+1]-1
//   /edge_offsets   [G+1] int    graph g's edges are columns edge_offsets[g] .. edge_offsets[g+1]-1
//   /node_features  [N_n, F]     float (optional when /node_type is there)
//   /node_type      [N_n] int    categorical node types, attribute vocab_size (optional)
//   /edge_index     [2, E] int   (source, target) of each edge, LOCAL node ids of its graph
//   /edge_features  [E, F_e]     float (optional)
//   /label          [G] int class, or [G] / [G, K] float (model.task = regression)
//   /graph_id       [G] int or [G, L] uint8 NUL-padded text (optional; `predict` copies it)
//
// Note [Graph splits]
// A sample is a graph. Graphs are independent, so there is no embargo, and for class labels
// the splits are stratified: each split holds (to within one graph) the same share of every
// class. The shared loader cuts splits and shards as contiguous ranges of sample numbers, so
// this layout numbers its graphs through a *view*, a permutation fixed by the labels and the
// split fractions alone (never by W or the seed):
//   1. planSplits gives the sizes n_train, n_val, n_test (exactly as the loader computes them).
//   2. The k-th graph of class c (file order) gets the key (k + 1/2) / n_c; sorted by key (ties:
//      lower class first), the first n_train graphs are train, the next n_val val, the rest
//      test. So every class is split in the fractions asked, its earliest graphs training.
//   3. The view lists the train graphs in file order, then val, then test. A split, a shard,
//      and a rank's part are contiguous in the view and ascending in the file.
// Regression labels are not stratified: the view is the file order (like the other layouts).
// The trade-off: a rank's part of a split is a set of graphs spread between the first and the
// last of them in the file, not a contiguous run. A rank reads that whole span with one
// hyperslab per dataset (the collective reads stay as they are) and keeps only its own graphs
// (prepareStore compacts them). When classes are mixed through the file the span is about its
// part; when the file is sorted by label it can hold the other splits' graphs too: up to about
// three times the rank's share is read (and counted by the memory check), never kept.
//
// Note [Graph gather]
// A store keeps its graphs' node rows, edge columns (local ids) and labels, compacted, plus
// per-store offsets node_offsets [n+1], edge_offsets [n+1] and the graphs' file numbers [n].
// A batch of positions `local` [B] becomes one disconnected graph, on the store's device:
//   counts   = offsets[local + 1] - offsets[local]                   // [B] nodes (edges)
//   graph    = repeat_interleave(arange(B), counts)                  // [total] nodeGraph
//   base     = cumsum(counts) - counts                               // [B] first row in batch
//   rows     = offsets[local][graph] + arange(total) - base[graph]   // rows of the store
//   x        = node_features[rows];  edge_index[:, edge rows] + base[graph of each edge]
// so local ids become batch rows by adding the graph's base on the device. The batch's size
// depends on its graphs, so the gather reads two numbers (total nodes, total edges) back to
// the host per batch: one small device-to-host copy.
#include "data/Layout.h"

namespace mb::data {

LayoutKind graphsLayoutKind();

class GraphsLayout final : public Layout {
 public:
  static std::shared_ptr<const Layout> open(hid_t file, const std::string& path,
                                            const Config& config);

  void describe(DataInfo& info) const override;
  std::vector<DatasetMeta> contentDatasets() const override;
  std::string fingerprintDetail() const override { return fingerprintDetail_; }
  NextStart oneWindowEmbargo(IndexReader& index) const override;
  StorePlan planStore(SampleRange samples, DType residentDtype, IndexReader& index) const override;
  std::vector<at::Tensor> prepareStore(const StorePlan& plan,
                                       std::vector<at::Tensor> tensors) const override;
  Batch gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
               at::ScalarType inputType) const override;
  std::vector<std::int64_t> sampleCosts(SampleRange samples) const override;
  at::Tensor sampleWeights(const std::vector<at::Tensor>& store) const override;

  // Note [Graph splits] steps 2-3: the view (view position -> file graph) for class `labels`
  // (>= 0) whose splits (and any gaps between them) end at the view positions `blockEnds`
  // (ascending, the last = labels.size()): graphs in key order, each block sorted by file order.
  static std::vector<std::int64_t> stratifiedView(const std::vector<std::int64_t>& labels,
                                                  const std::vector<std::int64_t>& blockEnds);

 protected:
  void checkInput(const ReadSpec& read, const at::Tensor& values) const override;

 private:
  // Where each tensor sits in a store (plan.reads order, then what prepareStore appends);
  // -1 for an optional dataset the file does not have.
  struct Slots {
    int nodeFeatures = -1;
    int nodeTypes = -1;
    int edgeIndex = -1;
    int edgeFeatures = -1;
    int labels = -1;
    int nodeOffsets = -1;  // [n+1] int64, appended by prepareStore
    int edgeOffsets = -1;  // [n+1] int64, appended
    int graphIds = -1;     // [n] int64 file graph numbers, appended
  };
  // The parts of kInput reads (ReadSpec::part).
  enum Part : std::size_t { kNodeFeatures = 0, kNodeTypes = 1, kEdgeIndex = 2, kEdgeFeatures = 3 };

  struct Datasets {
    DatasetMeta nodeOffsets, edgeOffsets, nodeFeatures, nodeTypes, edgeIndex, edgeFeatures,
        graphIds;
  };
  GraphsLayout(FileSchema schema, Datasets datasets, std::vector<std::int64_t> nodeOffsets,
               std::vector<std::int64_t> edgeOffsets, std::vector<std::int64_t> view,
               std::int64_t vocabSize, std::string fingerprintDetail);

  // The file graphs of view positions [begin, end): ascending (checked).
  std::vector<std::int64_t> graphsOf(SampleRange samples) const;
  // The file graph whose nodes (edges) include row `row` of the node (edge) datasets.
  std::int64_t graphOfNode(std::int64_t row) const;
  std::int64_t graphOfEdge(std::int64_t column) const;
  void checkEdges(const ReadSpec& read, const at::Tensor& edges) const;

  Datasets d_;
  std::vector<std::int64_t> nodeOffsets_;  // [G+1] of the file
  std::vector<std::int64_t> edgeOffsets_;  // [G+1] of the file
  std::vector<std::int64_t> view_;         // [G] view position -> file graph (Note [Graph splits])
  std::int64_t vocabSize_ = 0;             // node types (0 without /node_type)
  std::string fingerprintDetail_;          // hash of sampled edge_index columns
  Slots slots_;
};

}  // namespace mb::data
