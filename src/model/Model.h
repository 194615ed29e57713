#pragma once
// The models users train, behind one interface the trainer drives. Parameter and buffer
// names are PyTorch state_dict names (`encoders.m5.weight_ih_l0`,
// `transformer.h.0.attn.c_attn.weight`): checkpoints store them as they are, so Python loads them
// into an equal torch.nn module.
//
// Loss contract (DESIGN.md "Splits and global order"): lossSum() returns the SUM of the
// per-term losses of the batch; the trainer divides by (global batch count x termsPerSample())
// so that gradients summed across ranks are the exact global-batch mean whatever the split.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

#include "config/Config.h"
#include "data/Batch.h"
#include "data/DataInfo.h"

namespace mb::model {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The core every kind implements: forward, loss, metrics, state I/O (tied weights), its name.
// What only some kinds need is an optional capability below, which those kinds inherit as
// well; callers ask for one with capability<C>(model), which is null for the other kinds.
class Model : public torch::nn::Module {
 public:
  // Forward pass on a batch; returns predictions (regression [B] or [B, K]), logits
  // (classification [B, C]; gpt [B, T, vocab]).
  virtual at::Tensor forward(const data::Batch& batch) = 0;
  // Sum of the loss terms of the batch (a 0-d fp32 tensor).
  virtual at::Tensor lossSum(const at::Tensor& output, const data::Batch& batch) = 0;
  // Loss terms per sample: 1, K targets for multi-target regression, context for gpt.
  virtual std::int64_t termsPerSample() const = 0;
  // Sums over the batch of evaluation metrics, each divided later by (count x termsPerSample):
  // e.g. {"mse", ...}, {"mae", ...}, {"accuracy", ...}. Computed without autograd.
  virtual NamedTensors metricSums(const at::Tensor& output, const data::Batch& batch) = 0;
  // The names metricSums() returns, in the same order, known without a batch (a rank may have
  // no evaluation samples but must still take part in the reduction of the sums).
  virtual std::vector<std::string> metricNames() const = 0;
  virtual std::string kind() const = 0;

  // state_dict names that alias another entry, as {alias, source}: tied weights such as gpt's
  // lm_head.weight = transformer.wte.weight. The alias is not registered as a parameter (so
  // parameters() lists each tensor once for the optimizer and the gradient reducer), but
  // the state dict carries it under both names, as PyTorch's state_dict() does.
  virtual std::vector<std::pair<std::string, std::string>> tiedWeights() const { return {}; }
};

// Capability: metrics of a whole split that are not sums over its samples (macro F1, ROC-AUC).
// Each evaluation batch gives per-sample rows ([B, splitRowWidth()] fp64, any device), the
// evaluation gathers every rank's rows and calls splitMetrics() once with all of them, on
// every rank. (kind: gnn)
class SplitMetrics {
 public:
  virtual ~SplitMetrics() = default;
  virtual std::int64_t splitRowWidth() const = 0;
  virtual at::Tensor splitRows(const at::Tensor& output, const data::Batch& batch) = 0;
  virtual std::map<std::string, double> splitMetrics(const at::Tensor& rows) const = 0;
};

// Capability: carried state per lane that is neither a parameter nor a buffer but must survive a
// checkpoint: the hidden states of a stateful LSTM's lanes (Note [Stateful lanes]; the trainer's
// side is train/loop/CarriedStates.h). (kind: lstm)
class StatefulLanes {
 public:
  virtual ~StatefulLanes() = default;
  // The carried states by name; empty when none is held (or the model is not stateful).
  virtual NamedTensors extraState() const = 0;
  virtual void loadExtraState(const NamedTensors& state) = 0;
  // Forgets the carried states (the lanes restart, e.g. at an epoch start).
  virtual void resetState() = 0;
  // Sizes the carried state for `lanes` lanes (all lanes of the run, on every rank), zero
  // where none is held. Throws CheckpointError when a loaded state has another lane count.
  virtual void setLaneCount(std::int64_t lanes) = 0;
};

// Capability: state cached per epoch, and counters worth logging. (kind: gat)
class EpochCache {
 public:
  virtual ~EpochCache() = default;
  // A train epoch starts (after the data's beginEpoch): the cache (gat's graphs with
  // model.graph.rebuild = per_epoch) resets.
  virtual void startEpoch(std::int64_t epoch) = 0;
  // e.g. the graphs built and cached: metrics.jsonl records them at log steps and the trainer
  // logs them at epoch ends.
  virtual std::vector<std::pair<std::string, double>> statistics() const = 0;
  // Drops everything cached and every count, as at the start of the run: the memory plan's
  // trial step (Note [Memory plan]) leaves no trace.
  virtual void forget() = 0;
};

// Capability: a forward pass in segments that train.recompute runs again in the backward pass
// instead of keeping their activations (Note [Activation recomputation] in model/Recompute.h).
// (kinds: gpt, gnn, gat, lstm)
class Recomputable {
 public:
  virtual ~Recomputable() = default;
  // Recompute segments 0, every, 2 x every, ...; 0: none.
  virtual void setRecomputeEvery(std::int64_t every) = 0;
  virtual std::int64_t segmentCount() const = 0;
  virtual std::string segmentName() const = 0;  // "transformer blocks"
};

// The capability C of `model`, or null when its kind has none.
template <class C>
C* capability(Model& model) {
  return dynamic_cast<C*>(&model);
}
template <class C>
const C* capability(const Model& model) {
  return dynamic_cast<const C*>(&model);
}

// EpochCache's calls for any model: no-ops for the kinds without one.
inline void startEpoch(Model& model, std::int64_t epoch) {
  if (auto* cache = capability<EpochCache>(model)) cache->startEpoch(epoch);
}
inline std::vector<std::pair<std::string, double>> statistics(const Model& model) {
  const auto* cache = capability<EpochCache>(model);
  return cache != nullptr ? cache->statistics() : std::vector<std::pair<std::string, double>>{};
}

// Builds the model `config.kind` for the data described by `info`, with parameters
// initialised from `seed` (identical on every rank; rank 0's are broadcast anyway).
std::shared_ptr<Model> buildModel(const ModelConfig& config, const data::DataInfo& info,
                                  std::uint64_t seed);

}  // namespace mb::model
