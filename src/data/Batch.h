#pragma once
// A batch as the model sees it: tensors on the training device, gathered from resident data.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace mb::data {

struct Batch {
  // One tensor per model input, in DataInfo::inputs order:
  //   samples: [B, T, F] or [B, F];  series: [B, window_s, F_s] per stream;  tokens: [B, context]
  //   int64.
  std::vector<at::Tensor> inputs;
  // regression: [B] or [B, K] float32;  classification: [B] int64;  tokens: [B, context] int64
  // (the inputs shifted by one).
  at::Tensor targets;
  // [B] int64: index of each sample in the file's sample numbering (predict alignment, lanes).
  at::Tensor sampleIndex;
  // sampleIndex on the host, where the loader knows it without reading the device (the
  // train and eval batches of ShardedData); empty otherwise. Lets a model key per-sample caches
  // (kind: gat's graphs) without a device-to-host sync in the step.
  std::vector<std::int64_t> hostSampleIndex;
  // [B] int64: global lane id of each row, for a stateful LSTM (model.stateful); undefined
  // otherwise. Rows of one lane in successive batches are consecutive in time.
  at::Tensor lanes;

  // Graph batches (data.layout = graphs; undefined otherwise): the batch's B graphs as one
  // disconnected graph of total_nodes nodes and E edges (Note [Graph gather] in
  // data/layouts/GraphsLayout.h). `inputs` is empty; row i of targets and sampleIndex is graph i.
  at::Tensor nodeFeatures;  // [total_nodes, F] input dtype; undefined if the file has none
  at::Tensor nodeTypes;     // [total_nodes] int64 categorical node types; undefined if none
  at::Tensor edgeIndex;     // [2, E] int64: (source, target) node rows of the batch
  at::Tensor edgeFeatures;  // [E, F_e] input dtype; undefined if the file has none
  at::Tensor nodeGraph;     // [total_nodes] int64: the graph (0..B-1) of each node ("batch")

  std::int64_t size() const { return sampleIndex.defined() ? sampleIndex.size(0) : 0; }
};

}  // namespace mb::data
