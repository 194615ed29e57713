#include "model/parts/PanelObjective.h"

#include <cmath>

#include <ATen/Functions.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/grad_mode.h>

#include "common/Error.h"
#include "model/parts/Objective.h"

namespace mb::model {
namespace {

// Mean over each date's present instruments of `perInstrument` [B, N], summed over dates.
at::Tensor sumOfDateMeans(const at::Tensor& perInstrument, const at::Tensor& present) {
  at::Tensor weight = present.to(at::kFloat);
  at::Tensor count = weight.sum(1).clamp_min(1);  // [B]
  return ((perInstrument * weight).sum(1) / count).sum();
}

}  // namespace

PanelObjective::PanelObjective(const ModelConfig& config, const data::DataInfo& info)
    : task_(config.task), loss_(resolvedLoss(config)), huberDelta_(config.huberDelta) {
  if (info.targetShape.size() > 1)
    throw DataError(info.path + ": panel targets must be [T, N] or [T, N, K], found " +
                        std::to_string(info.targetShape.size() + 2) + " dimensions",
                    "flatten the targets of each instrument to K columns");
  targets_ = info.targetShape.empty() ? 1 : info.targetShape[0];
  if (task_ == Task::kClassification) {
    if (targets_ != 1)
      throw ConfigError(
          "model.task = classification on a panel predicts the sign of one return "
          "per instrument, but " +
              info.path + " has K = " + std::to_string(targets_) + " targets",
          "use model.task = regression, or write /target as [T, N]");
    if (config.numClasses != 0 && config.numClasses != 2)
      throw ConfigError("model.num_classes = " + std::to_string(config.numClasses) +
                            ": classification on a panel has two classes (return <= 0, > 0)",
                        "leave model.num_classes = 0");
    outputs_ = 2;
  } else {
    outputs_ = targets_;
    terms_ = targets_;
  }
}

at::Tensor PanelObjective::predictions(const at::Tensor& raw) const {
  if (task_ == Task::kRegression && targets_ == 1) return raw.squeeze(2);  // [B, N]
  return raw;
}

at::Tensor PanelObjective::targetsByTerm(const at::Tensor& targets) const {
  at::Tensor t = targets.to(at::kFloat);
  return t.dim() == 2 ? t.unsqueeze(2) : t;  // [B, N, K]
}

at::Tensor PanelObjective::scores(const at::Tensor& output) const {
  at::Tensor out = output.to(at::kFloat);
  if (task_ == Task::kClassification)
    return (out.select(2, 1) - out.select(2, 0)).unsqueeze(2);  // [B, N, 1]
  return out.dim() == 2 ? out.unsqueeze(2) : out;
}

at::Tensor PanelObjective::perInstrumentLoss(const at::Tensor& output,
                                             const at::Tensor& targets) const {
  at::Tensor out = output.to(at::kFloat);
  if (task_ == Task::kClassification) {
    at::Tensor labels = targets.to(at::kFloat).gt(0).to(at::kLong);  // [B, N]
    return at::cross_entropy_loss(out.reshape({-1, 2}), labels.reshape({-1}), {},
                                  at::Reduction::None)
        .view(labels.sizes());
  }
  at::Tensor prediction = out.dim() == 2 ? out.unsqueeze(2) : out;  // [B, N, K]
  at::Tensor target = targetsByTerm(targets);
  at::Tensor terms = loss_ == LossKind::kHuber
                         ? at::huber_loss(prediction, target, at::Reduction::None, huberDelta_)
                         : at::mse_loss(prediction, target, at::Reduction::None);
  return terms.sum(2);  // [B, N]
}

at::Tensor PanelObjective::lossSum(const at::Tensor& output, const at::Tensor& targets,
                                   const at::Tensor& present) const {
  return sumOfDateMeans(perInstrumentLoss(output, targets), present);
}

std::vector<std::string> PanelObjective::metricNames() const {
  if (task_ == Task::kClassification) return {"accuracy", "ic", "rank_ic"};
  return {"mse", "mae", "ic", "rank_ic"};
}

NamedTensors PanelObjective::metricSums(const at::Tensor& output, const at::Tensor& targets,
                                        const at::Tensor& present) const {
  at::NoGradGuard noGrad;
  NamedTensors sums;
  at::Tensor target = targetsByTerm(targets);
  at::Tensor score = scores(output.detach());
  if (task_ == Task::kClassification) {
    at::Tensor correct = output.detach().argmax(2).eq(targets.gt(0).to(at::kLong)).to(at::kFloat);
    sums.emplace_back("accuracy", sumOfDateMeans(correct, present));
  } else {
    at::Tensor error = score - target;  // [B, N, K]
    sums.emplace_back("mse", sumOfDateMeans(error.square().sum(2), present));
    sums.emplace_back("mae", sumOfDateMeans(error.abs().sum(2), present));
  }
  sums.emplace_back("ic", sumOfCrossSectionalCorrelations(score, target, present));
  sums.emplace_back("rank_ic",
                    sumOfCrossSectionalCorrelations(crossSectionalRanks(score, present),
                                                    crossSectionalRanks(target, present), present));
  return sums;
}

at::Tensor sumOfCrossSectionalCorrelations(const at::Tensor& x, const at::Tensor& y,
                                           const at::Tensor& present) {
  at::Tensor weight = present.to(at::kDouble).unsqueeze(2);  // [B, N, 1]
  at::Tensor count = weight.sum(1, /*keepdim=*/true);        // [B, 1, 1]
  at::Tensor a = x.to(at::kDouble), b = y.to(at::kDouble);
  at::Tensor n = count.clamp_min(1);
  at::Tensor da = (a - (a * weight).sum(1, true) / n) * weight;
  at::Tensor db = (b - (b * weight).sum(1, true) / n) * weight;
  at::Tensor covariance = (da * db).sum(1);  // [B, K]
  at::Tensor scale = (da.square().sum(1) * db.square().sum(1)).sqrt();
  at::Tensor defined = scale.gt(1e-12).logical_and(count.squeeze(1).ge(2));
  at::Tensor correlation =
      at::where(defined, covariance / scale.clamp_min(1e-12), at::zeros({}, scale.options()));
  return correlation.sum().to(at::kFloat);
}

at::Tensor crossSectionalRanks(const at::Tensor& x, const at::Tensor& present) {
  at::Tensor mask = present.unsqueeze(2).expand_as(x);
  at::Tensor key =
      at::where(mask, x.to(at::kFloat), at::full({}, INFINITY, x.options().dtype(at::kFloat)));
  at::Tensor order =
      std::get<1>(at::sort(key, c10::optional<bool>(true), /*dim=*/1, /*descending=*/false));
  at::Tensor positions =
      at::arange(x.size(1), order.options()).view({1, x.size(1), 1}).expand_as(order);
  return at::empty_like(order).scatter_(1, order, positions).to(at::kFloat);
}

}  // namespace mb::model
