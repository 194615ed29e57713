#include "dist/SingleCommunicator.h"

#include <ATen/Functions.h>

#include "common/Error.h"

namespace mb::dist {

const char* toString(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

std::shared_ptr<Work> SingleCommunicator::allReduceAsync(at::Tensor tensor, ReduceOp op,
                                                         const std::string& label) {
  // Sum, average, max and min of one value are that value.
  return std::make_shared<CompletedWork>();
}

void SingleCommunicator::broadcast(at::Tensor tensor, int root, const std::string& label) {
  if (root != 0)
    throw RuntimeError(label + ": broadcast root " + std::to_string(root) + " in a world of one");
}

at::Tensor SingleCommunicator::allGather(const at::Tensor& tensor, const std::string& label) {
  return tensor.unsqueeze(0).clone();
}

}  // namespace mb::dist
