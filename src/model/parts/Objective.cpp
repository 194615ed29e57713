#include "model/parts/Objective.h"

#include <string>

#include <ATen/Functions.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/grad_mode.h>

#include "common/Error.h"
#include "common/Strings.h"

namespace mb::model {
LossKind resolvedLoss(const ModelConfig& config) {
  if (config.loss != LossKind::kAuto) return config.loss;
  return config.task == Task::kClassification ? LossKind::kCrossEntropy : LossKind::kMse;
}

Objective::Objective(const ModelConfig& config, const data::DataInfo& info)
    : task_(config.task),
      loss_(resolvedLoss(config)),
      huberDelta_(config.huberDelta),
      targetShape_(info.targetShape) {
  if (targetShape_.size() > 1)
    throw DataError(info.path + ": targets have " + std::to_string(targetShape_.size() + 1) +
                        " dimensions; lstm and mlp models predict [N] or [N, K] targets",
                    "flatten the targets to [N, K]");
  if (task_ == Task::kClassification) {
    if (!targetShape_.empty())
      throw ConfigError(
          "model.task = classification needs one label per sample ([N] targets), but " + info.path +
              " has targets of shape [N, " + std::to_string(targetShape_[0]) + "]",
          "use model.task = regression, or write one integer label per sample");
    outputs_ = config.numClasses > 0 ? config.numClasses : info.numClasses;
    if (outputs_ < 2)
      throw ConfigError("model.task = classification needs at least 2 classes, found " +
                            std::to_string(outputs_) + " (model.num_classes = " +
                            std::to_string(config.numClasses) + ", labels in " + info.path + ")",
                        "set model.num_classes");
    if (config.numClasses > 0 && config.numClasses < info.numClasses)
      throw ConfigError("model.num_classes = " + std::to_string(config.numClasses) + " but " +
                            info.path + " has labels up to " + std::to_string(info.numClasses - 1),
                        "raise model.num_classes to " + std::to_string(info.numClasses) +
                            " or leave it 0 to take it from the data");
  } else {
    outputs_ = targetShape_.empty() ? 1 : targetShape_[0];
    terms_ = outputs_;
  }
}

at::Tensor Objective::predictions(const at::Tensor& raw) const {
  if (task_ == Task::kRegression && targetShape_.empty()) return raw.squeeze(1);  // [B]
  return raw;
}

void Objective::checkTargets(const at::Tensor& output, const at::Tensor& targets) const {
  bool ok = targets.defined() && targets.dim() >= 1 && targets.size(0) == output.size(0);
  if (ok && task_ == Task::kClassification)
    ok = targets.dim() == 1 && !at::isFloatingType(targets.scalar_type());
  if (ok && task_ == Task::kRegression) ok = targets.sizes() == output.sizes();
  if (!ok)
    throw RuntimeError(
        "model: targets of shape " +
        (targets.defined() ? str::shapeText(targets.sizes()) : std::string("(none)")) +
        " do not fit outputs of shape " + str::shapeText(output.sizes()) +
        (task_ == Task::kClassification ? " (expected [B] integer labels)" : ""));
}

at::Tensor Objective::lossSum(const at::Tensor& output, const at::Tensor& targets,
                              const at::Tensor& classWeight) const {
  checkTargets(output, targets);
  at::Tensor out = output.to(at::kFloat);
  switch (loss_) {
    case LossKind::kCrossEntropy:
      return at::cross_entropy_loss(out, targets.to(at::kLong), classWeight, at::Reduction::Sum);
    case LossKind::kHuber:
      return at::huber_loss(out, targets.to(at::kFloat), at::Reduction::Sum, huberDelta_);
    default:
      return at::mse_loss(out, targets.to(at::kFloat), at::Reduction::Sum);
  }
}

std::vector<std::string> Objective::metricNames() const {
  if (task_ == Task::kClassification) return {"accuracy"};
  return {"mse", "mae"};
}

NamedTensors Objective::metricSums(const at::Tensor& output, const at::Tensor& targets) const {
  checkTargets(output, targets);
  at::NoGradGuard noGrad;
  if (task_ == Task::kClassification) {
    at::Tensor correct = output.argmax(1).eq(targets.to(at::kLong)).sum().to(at::kFloat);
    return {{"accuracy", correct}};
  }
  at::Tensor error = output.detach().to(at::kFloat) - targets.to(at::kFloat);
  return {{"mse", error.square().sum()}, {"mae", error.abs().sum()}};
}

}  // namespace mb::model
