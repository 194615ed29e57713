#pragma once
// Resident data of one contiguous sample range, and the gathers that build batches from it.
//
// Note [Window gather]
// A store keeps what its layout read for it (Layout::planStore), once, and builds a batch by
// index arithmetic on whatever device it lives (DESIGN.md "Data lives on the GPU"). A series
// store keeps, per stream, the stream's rows that its samples' windows cover ([T_s, F_s]) and
// each sample's end row relative to them ([n] int32). A batch of sample positions `local` [B]
// becomes, per stream,
//   rows   = ends[local] - (window - 1) + arange(window)   // [B, window] row indices
//   inputs = values.index_select(0, rows.flatten()).view(B, window, F)
// so a window costs memory only inside the batch, never per sample. Tokens work the same way
// with rows local*context + arange(context + 1) of the token array.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "data/Batch.h"
#include "data/DataInfo.h"
#include "data/pipeline/StorePlan.h"

namespace mb::data {

class Layout;

class Store {
 public:
  Store() = default;
  // `tensors` follow plan.reads and live on one device.
  Store(std::shared_ptr<const Layout> layout, const StorePlan& plan,
        std::vector<at::Tensor> tensors);

  const SampleRange& samples() const { return samples_; }
  std::int64_t bytes() const { return bytes_; }
  c10::Device device() const { return device_; }

  // Samples at positions `local` ([B] int64 in [0, samples().size()), on device()).
  Batch gather(const at::Tensor& local, at::ScalarType inputType) const;
  // Samples [begin, end) of the store.
  Batch slice(std::int64_t begin, std::int64_t end, at::ScalarType inputType) const;
  // The `count` heaviest samples (Layout::sampleWeights) in store order; the first `count` when
  // all weigh the same.
  Batch heaviest(std::int64_t count, at::ScalarType inputType) const;
  // Largest target label in the store (classification), -1 if empty.
  std::int64_t maxLabel() const;
  // [classes] int64 (CPU): how many of the store's samples have each label (zeros unless the
  // targets are class labels).
  at::Tensor labelCounts(std::int64_t classes) const;
  // [2, terms] fp64 (CPU): per target term (the last dimension when `terms` > 1), the sum of
  // the store's real-valued targets and how many were summed (Layout::targetsPresent); zeros
  // for class labels and tokens.
  at::Tensor targetSums(std::int64_t terms) const;

 private:
  std::shared_ptr<const Layout> layout_;
  SampleRange samples_;
  c10::Device device_{c10::kCPU};
  std::int64_t bytes_ = 0;
  std::vector<at::Tensor> tensors_;  // in plan.reads order, as Layout::prepareStore left them
  at::Tensor targets_;               // the kTargets read, if any
};

}  // namespace mb::data
