#pragma once
// model.kind = lstm: one LSTM encoder per input stream (the timeframes of the `series`
// layout, or the single [N, T, F] input of `samples`), the last layer's final hidden state of
// every stream concatenated, then an MLP head.
//
// state_dict names (equal to this torch.nn module):
//   encoders.<stream>.{weight_ih,weight_hh,bias_ih,bias_hh}_l<k>   nn.LSTM(batch_first=True)
//   head.0.{weight,bias}, head.3.{weight,bias}   nn.Sequential(Linear, GELU, Dropout, Linear)
//   (head.0.* alone when model.head_hidden = 0: nn.Sequential(Linear))
//
// Note [Stateful lanes]
// With model.stateful, the final (h, c) of each row are kept per lane, detached (truncated
// BPTT), and used as the initial state of that lane's next row: batch.lanes [B] names the
// global lane of each row. The states live in the model, one [layers, lanes, hidden] fp32
// pair per stream, behind the StatefulLanes capability (model/Model.h). The trainer sizes them
// to all lanes of the run on every rank (setLaneCount), so their shapes agree across ranks; a
// rank only advances the lanes of its own shards, and a checkpoint sums every rank's own lanes
// (train/loop/CarriedStates.h). Without setLaneCount (a model used on its own) the first lane batch
// sizes them to its largest lane id; after that the step reads no lane id on the host (no
// per-step sync). Which rows form a lane, and when lanes restart, is Note [Lane order]
// (data/pipeline/GlobalOrder.h). A batch without lanes runs from a zero state (evaluation); in
// training mode a stateful model refuses one, because silently dropping the carried state would
// be wrong.
//
// Note [LSTM precision]
// The LSTM takes its input in the weights' dtype (fp32; resident bf16 data is cast up) and
// leaves reduced precision to autocast. On CUDA, torch::nn::LSTM runs cuDNN's fused kernel,
// and autocast's cuDNN-RNN wrapper (ATen/cudnn/AutocastRNN.cpp) casts it to fp16 whatever the
// autocast dtype, because ATen's cuDNN RNN does not accept bf16 (cudnn_is_acceptable); cuDNN
// accumulates in fp32. On CPU (1.13) autocast does not cover the LSTM: it runs in fp32 and
// the head's linears in bf16. This is what a PyTorch user gets from torch.autocast as well.
//
// Note [LSTM time segments]
// With train.recompute (Note [Activation recomputation], model/Recompute.h) each encoder runs
// its window in segments of about sqrt(T) steps, all layers of a segment at once, as in
// memory-efficient BPTT (Gruslys et al. 2016). A recomputed segment keeps its slice of the
// input (a view of the batch), the (h, c) of every layer where it starts, and nothing inside:
// the backward pass runs it again from there. What is kept per sample is about 2 x layers x
// hidden floats per segment, against the whole window's gates and cell states without.
//   - Dropout between layers: LibTorch's LSTM draws one mask per layer over the layer's whole
//     time-major output [T, B, hidden], after running the layer, and draws nothing else in
//     between; so drawing the masks up front, layer by layer, gives the same masks. They are
//     kept as bool (a byte an element) and turned back into the same noise (0 or 1 / (1 - p))
//     when a segment runs. On CUDA, cuDNN's fused LSTM draws its own masks, so there the masks
//     differ from a run without recomputation (the same in distribution).
//   - Stateful lanes (Note [Stateful lanes]) start the first segment from the lanes' state and
//     keep the last segment's (h, c), as one call over the window does.
//   - Equality: close, not bit for bit, on the CPU in fp32. A weight's gradient sums T x B
//     terms; a segment's backward sums its own share and the shares are added after, which is
//     another order of fp32 additions. And the input's matrix product is taken per segment
//     rather than over the window, which BLAS may block differently for another height (seen
//     with 22-step segments, not with 48). The difference is rounding: unit.Lstm's
//     LstmRecompute tests bound it at 1e-5 of the largest gradient of each tensor, dropout on.
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/rnn.h>

#include "model/Model.h"
#include "model/ModelRegistry.h"
#include "model/parts/Objective.h"

namespace mb::model {

class Lstm : public Model, public StatefulLanes, public Recomputable {
 public:
  Lstm(const ModelConfig& config, const data::DataInfo& info);

  at::Tensor forward(const data::Batch& batch) override;
  at::Tensor lossSum(const at::Tensor& output, const data::Batch& batch) override;
  std::int64_t termsPerSample() const override { return objective_.termsPerSample(); }
  NamedTensors metricSums(const at::Tensor& output, const data::Batch& batch) override;
  std::vector<std::string> metricNames() const override { return objective_.metricNames(); }
  std::string kind() const override { return "lstm"; }

  NamedTensors extraState() const override;
  void loadExtraState(const NamedTensors& state) override;
  void resetState() override;
  void setLaneCount(std::int64_t lanes) override;

  // Recomputable: the time segments of the longest stream (Note [LSTM time segments]).
  void setRecomputeEvery(std::int64_t every) override { recomputeEvery_ = every; }
  std::int64_t segmentCount() const override;
  std::string segmentName() const override;

 private:
  // Final hidden state of the last layer for stream `s`: [B, hidden].
  at::Tensor encode(std::size_t s, const at::Tensor& input, const at::Tensor& lanes);
  void growLanes(std::int64_t lanes);
  // Note [oneDNN LSTM inference]: whether stream `s` must run LibTorch's own LSTM here.
  bool avoidOneDnnInference(std::size_t s, const at::Tensor& x) const;
  // The final (h, c) [layers, B, hidden] of stream `s` from (h0, c0), in time segments.
  std::pair<at::Tensor, at::Tensor> encodeInSegments(std::size_t s, const at::Tensor& x,
                                                     at::Tensor h, at::Tensor c);
  // Layer by layer over one segment; `masks` as in Note [LSTM time segments].
  std::vector<at::Tensor> runSegment(std::size_t s, const std::vector<at::Tensor>& in,
                                     std::int64_t t0, const std::vector<at::Tensor>& weights,
                                     const std::vector<at::Tensor>& masks, double dropout) const;

  std::vector<std::string> streams_;
  std::vector<std::int64_t> features_;  // per stream
  std::vector<std::int64_t> windows_;   // per stream
  std::int64_t hidden_;
  std::int64_t layers_;
  bool stateful_;
  std::int64_t recomputeEvery_ = 0;  // 0: no time segments
  Objective objective_;
  torch::nn::ModuleDict encoders_{nullptr};
  std::vector<torch::nn::LSTM> lstms_;  // encoders_ in stream order
  torch::nn::Sequential head_{nullptr};
  // Note [Stateful lanes]: per stream [layers, lanes, hidden] fp32, undefined until used.
  std::vector<at::Tensor> laneH_;
  std::vector<at::Tensor> laneC_;
  // Note [oneDNN LSTM inference], per stream: -1 not probed yet, 0 right, 1 wrong.
  mutable std::vector<int> oneDnnInferenceWrong_;
  mutable std::mutex probeMutex_;
};

// model.kind = lstm, for ModelRegistry.cpp.
ModelKind lstmModelKind();

}  // namespace mb::model
