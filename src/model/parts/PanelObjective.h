#pragma once
// What a cross-sectional model (kind: gat on the panel layout) predicts and how it is scored.
//
// Note [Panel loss]
// A sample is a date; its terms are the instruments present on it. The loss of a date is the
// mean over its present instruments of the per-instrument loss (summed over K targets), so
// every date weighs the same whatever its instrument count; lossSum() is the sum over the
// batch's dates (Model.h's contract: the trainer divides by the global date count x K).
//   regression:     MSE or Huber of the prediction [B, N] or [B, N, K] against the target;
//   classification: cross-entropy of two logits [B, N, 2] against the sign of the return,
//                   label = target > 0 (model.task = classification on a panel).
// Metrics, summed over dates (and K) like the loss, so that evaluation's division gives the mean
// over dates:
//   ic       Pearson correlation across the date's present instruments between the prediction
//            (classification: logit 1 - logit 0) and the target: the daily information coefficient;
//   rank_ic  the same between their ranks (Spearman; ties ranked in instrument order);
//   mse, mae (regression) or accuracy (classification), averaged over the date's instruments.
// A date with fewer than two present instruments, or a constant prediction or target, has an
// IC of 0 (a constant prediction, such as a cross-sectional mean, has no IC).
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "config/Config.h"
#include "data/DataInfo.h"
#include "model/Model.h"

namespace mb::model {

class PanelObjective {
 public:
  PanelObjective(const ModelConfig& config, const data::DataInfo& info);

  // Outputs per instrument: K targets, or 2 logits for classification.
  std::int64_t outputs() const { return outputs_; }
  // [B, N, outputs] -> [B, N] (one target), [B, N, K], or [B, N, 2] logits.
  at::Tensor predictions(const at::Tensor& raw) const;
  // `targets` [B, N] or [B, N, K], `present` [B, N] bool.
  at::Tensor lossSum(const at::Tensor& output, const at::Tensor& targets,
                     const at::Tensor& present) const;
  std::int64_t termsPerSample() const { return terms_; }
  NamedTensors metricSums(const at::Tensor& output, const at::Tensor& targets,
                          const at::Tensor& present) const;
  std::vector<std::string> metricNames() const;

 private:
  // [B, N, K] views of the prediction (classification: the logit difference) and target.
  at::Tensor scores(const at::Tensor& output) const;
  at::Tensor targetsByTerm(const at::Tensor& targets) const;
  // Per instrument loss [B, N] (summed over K).
  at::Tensor perInstrumentLoss(const at::Tensor& output, const at::Tensor& targets) const;

  Task task_;
  LossKind loss_;
  double huberDelta_;
  std::int64_t targets_ = 1;  // K
  std::int64_t outputs_ = 1;
  std::int64_t terms_ = 1;
};

// Sum over dates b and terms k of the Pearson correlation across present instruments of
// x[b, :, k] and y[b, :, k]: `x`, `y` [B, N, K] float, `present` [B, N] bool. 0 for a date
// with fewer than two present instruments or a constant side.
at::Tensor sumOfCrossSectionalCorrelations(const at::Tensor& x, const at::Tensor& y,
                                           const at::Tensor& present);
// Ranks 0..n-1 of `x` [B, N, K] among the present instruments of each date (absent: n..N-1),
// ties in instrument order.
at::Tensor crossSectionalRanks(const at::Tensor& x, const at::Tensor& present);

}  // namespace mb::model
