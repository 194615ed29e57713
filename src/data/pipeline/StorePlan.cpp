#include "data/pipeline/StorePlan.h"

namespace mb::data {

std::vector<std::int64_t> withRows(std::int64_t rows, const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> shape = dims;
  if (shape.empty()) shape.push_back(0);
  shape[0] = rows;
  return shape;
}

at::ScalarType residentFloatType(DType residentDtype) {
  return residentDtype == DType::kBf16 ? at::kBFloat16 : at::kFloat;
}

std::int64_t ReadSpec::bytes() const {
  std::int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n * static_cast<std::int64_t>(c10::elementSize(type));
}

std::int64_t StorePlan::bytes() const {
  std::int64_t total = 0;
  for (const auto& read : reads)
    total += read.bytes();
  return total;
}

}  // namespace mb::data
