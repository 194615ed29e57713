#include "data/pipeline/TargetStats.h"

#include <algorithm>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "config/Config.h"
#include "dist/Communicator.h"

namespace mb::data {

std::int64_t countClasses(const std::array<Store, 3>& stores, const FileSchema& schema,
                          std::int64_t configured, dist::Communicator& comm) {
  std::int64_t local = -1;
  for (const auto& store : stores)
    local = std::max(local, store.maxLabel());
  at::Tensor all = at::full({1}, local, at::kLong);
  comm.allReduce(all, dist::ReduceOp::kMax, "data: largest class label");
  std::int64_t largest = all.item<std::int64_t>();
  if (largest >= kMaxClasses) {
    // Labels this large are ids, not class indices; counting them would allocate per class.
    Error error = DataError(
        schema.path + ": dataset /" + schema.targets.path + ": class label " +
            std::to_string(largest) + " (labels are class indices 0..C-1, at most " +
            std::to_string(kMaxClasses) + " classes)",
        "number the classes 0..C-1, e.g. labels = np.unique(ids, return_inverse=True)[1]");
    error.markAgreed();  // the same all-reduced value on every rank
    throw error;
  }
  if (configured > 0 && largest >= configured) {
    Error error = DataError(schema.path + ": dataset /" + schema.targets.path + ": class label " +
                                std::to_string(largest) +
                                " >= model.num_classes = " + std::to_string(configured),
                            "set model.num_classes = 0 to take it from the labels");
    error.markAgreed();  // the same all-reduced value on every rank
    throw error;
  }
  return configured > 0 ? configured : largest + 1;
}

std::vector<std::int64_t> trainClassCounts(const Store& train, std::int64_t classes,
                                           dist::Communicator& comm) {
  at::Tensor counts = train.labelCounts(classes).contiguous();
  comm.allReduce(counts, dist::ReduceOp::kSum, "data: train labels per class");
  return {counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + counts.numel()};
}

std::vector<double> trainTargetMean(const Store& train,
                                    const std::vector<std::int64_t>& targetShape,
                                    dist::Communicator& comm) {
  std::int64_t terms = 1;
  for (std::int64_t d : targetShape)
    terms *= d;
  at::Tensor sums = train.targetSums(terms).contiguous();
  comm.allReduce(sums, dist::ReduceOp::kSum, "data: train target sums");
  std::vector<double> mean;
  for (std::int64_t k = 0; k < terms; ++k) {
    const double count = sums[1][k].item<double>();
    if (count <= 0) return {};
    mean.push_back(sums[0][k].item<double>() / count);
  }
  return mean;
}

}  // namespace mb::data
