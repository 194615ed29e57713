#include "data/Store.h"

#include <ATen/Functions.h>

#include "data/Layout.h"

namespace mb::data {

Store::Store(std::shared_ptr<const Layout> layout, const StorePlan& plan,
             std::vector<at::Tensor> tensors)
    : layout_(std::move(layout)), samples_(plan.samples) {
  if (!tensors.empty()) device_ = tensors.front().device();
  for (std::size_t i = 0; i < plan.reads.size(); ++i) {
    const at::Tensor& t = tensors.at(i);
    bytes_ += t.numel() * static_cast<std::int64_t>(t.element_size());
    if (plan.reads[i].role == Role::kTargets) targets_ = t;
  }
  tensors_ = layout_->prepareStore(plan, std::move(tensors));
}

Batch Store::gather(const at::Tensor& local, at::ScalarType inputType) const {
  Batch batch = layout_->gather(tensors_, local, inputType);
  batch.sampleIndex = local.add(samples_.begin);
  return batch;
}

Batch Store::slice(std::int64_t begin, std::int64_t end, at::ScalarType inputType) const {
  return gather(at::arange(begin, end, at::TensorOptions().dtype(at::kLong).device(device_)),
                inputType);
}

std::int64_t Store::maxLabel() const {
  if (!targets_.defined() || targets_.numel() == 0 || targets_.scalar_type() != at::kLong)
    return -1;
  return targets_.max().item<std::int64_t>();
}

}  // namespace mb::data
