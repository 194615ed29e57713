#include "data/pipeline/Store.h"

#include <ATen/Functions.h>

#include "data/Layout.h"

namespace mb::data {

Store::Store(std::shared_ptr<const Layout> layout, const StorePlan& plan,
             std::vector<at::Tensor> tensors)
    : layout_(std::move(layout)), samples_(plan.samples) {
  if (!tensors.empty()) device_ = tensors.front().device();
  tensors_ = layout_->prepareStore(plan, std::move(tensors));
  // Counted after prepareStore: what stays resident (a layout may drop rows it read).
  for (const auto& t : tensors_) {
    if (t.defined()) bytes_ += t.numel() * static_cast<std::int64_t>(t.element_size());
  }
  // prepareStore keeps the kTargets slot: exactly the store's samples' targets, in order.
  for (std::size_t i = 0; i < plan.reads.size(); ++i) {
    if (plan.reads[i].role == Role::kTargets) targets_ = tensors_.at(i);
  }
}

Batch Store::gather(const at::Tensor& local, at::ScalarType inputType) const {
  Batch batch = layout_->gather(tensors_, local, inputType);
  // A layout whose sample numbers are not the file's rows (graphs) sets it itself.
  if (!batch.sampleIndex.defined()) batch.sampleIndex = local.add(samples_.begin);
  return batch;
}

Batch Store::slice(std::int64_t begin, std::int64_t end, at::ScalarType inputType) const {
  return gather(at::arange(begin, end, at::TensorOptions().dtype(at::kLong).device(device_)),
                inputType);
}

Batch Store::heaviest(std::int64_t count, at::ScalarType inputType) const {
  const at::Tensor weights = layout_->sampleWeights(tensors_);
  if (!weights.defined()) return slice(0, count, inputType);
  const at::Tensor chosen = std::get<1>(at::topk(weights, count));
  return gather(std::get<0>(at::sort(chosen)).to(device_), inputType);
}

at::Tensor Store::labelCounts(std::int64_t classes) const {
  if (!targets_.defined() || targets_.numel() == 0 || targets_.scalar_type() != at::kLong)
    return at::zeros({classes}, at::kLong);
  return at::bincount(targets_.reshape({-1}).cpu(), {}, classes).to(at::kLong);
}

at::Tensor Store::targetSums(std::int64_t terms) const {
  at::Tensor sums = at::zeros({2, terms}, at::kDouble);
  if (!targets_.defined() || targets_.numel() == 0 || !at::isFloatingType(targets_.scalar_type()))
    return sums;
  const at::Tensor values = targets_.to(at::kCPU, at::kDouble).reshape({-1, terms});
  const at::Tensor present = layout_->targetsPresent(tensors_);
  const at::Tensor counted =
      present.defined() ? present.to(at::kCPU, at::kBool).reshape({-1, 1}).expand_as(values)
                        : at::ones_like(values, at::kBool);
  sums[0] = at::where(counted, values, at::zeros_like(values)).sum(0);
  sums[1] = counted.to(at::kDouble).sum(0);
  return sums;
}

std::int64_t Store::maxLabel() const {
  if (!targets_.defined() || targets_.numel() == 0 || targets_.scalar_type() != at::kLong)
    return -1;
  return targets_.max().item<std::int64_t>();
}

}  // namespace mb::data
