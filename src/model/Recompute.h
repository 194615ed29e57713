#pragma once
// Note [Activation recomputation]
// train.recompute trades compute for memory (issue 37): a segment of the forward pass (a
// transformer block) runs without keeping its activations, and the backward pass runs it again
// from its saved input, then backpropagates through that copy. As torch.utils.checkpoint does:
//   - the second forward replays the RNG state of the first (dropout draws the same masks) and
//     runs under the autocast state of the first;
//   - its output must have the shape and dtype of the first's (checked: a segment that is not
//     deterministic in them is a bug, and silent wrong gradients are worse than an error);
//   - parameter gradients accumulate during the recomputed backward, so their AccumulateGrad
//     hooks (the gradient reducer's bucket launches) fire there, in the segment's usual order.
// LibTorch has no C++ torch.utils.checkpoint (pytorch issue 52744). This is the reentrant kind:
// a backward node of its own whose apply() calls the autograd engine again on the copy. The
// segment's input is kept; what the segment computes inside is not. The node is made whenever
// grad mode is on, also for an input that needs no gradient: the parameters inside still do.
// Equality: the recomputed forward runs the same kernels on the same input with the same random
// numbers, so on the CPU in fp32 the gradients equal a run without recomputation bit for bit
// (py.train.recompute.*).
#include <functional>

#include <ATen/core/Tensor.h>

namespace mb::model {

using Segment = std::function<at::Tensor(const at::Tensor&)>;

// segment(input), keeping only `input` for the backward pass, which runs segment again. Without
// grad mode (evaluation, sampling) it is segment(input).
at::Tensor recomputed(const Segment& segment, const at::Tensor& input);

}  // namespace mb::model
