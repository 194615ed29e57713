#pragma once
// Note [Row gathers]
// Graph models gather rows by edge (x[src]: one row per edge) and scatter them back. On the CPU,
// index_select's backward is an index_add_ that LibTorch runs row by row: 26 ms for the
// [4000, 4] -> 44,000-edge gather of the panel GAT, against 0.7 ms for the backward of advanced
// indexing (an index_put_ with accumulate), the same sums (bench/profile_ops.py found it). On
// CUDA index_select's backward is an atomic index_add_, the faster of the two, so the choice is
// by device. Forward values are equal either way; summation order in the backward may differ
// by float rounding.
#include <ATen/TensorIndexing.h>
#include <ATen/core/Tensor.h>

namespace mb::model {

// t[index] along dimension 0: rows `index` (int64 [E]) of `t` ([M, ...]) -> [E, ...].
inline at::Tensor gatherRows(const at::Tensor& t, const at::Tensor& index) {
  if (t.device().is_cpu()) return t.index({index});
  return t.index_select(0, index);
}

}  // namespace mb::model
