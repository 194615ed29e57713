#pragma once
// Note [Activation recomputation]
// train.recompute trades compute for memory: a segment of the forward pass (a
// transformer block) runs without keeping its activations, and the backward pass runs it again
// from its saved input, then backpropagates through that copy. As torch.utils.checkpoint does:
//   - the second forward replays the RNG state of the first (dropout draws the same masks) and
//     runs under the autocast state of the first;
//   - its output must have the shape and dtype of the first's (checked: a segment that is not
//     deterministic in them is a bug, and silent wrong gradients are worse than an error);
//   - the parameters' gradients leave through the segment's node, so the engine adds those of
//     every segment that shares a weight before the weight's AccumulateGrad runs, once a step
//     as without recomputation; the gradient reducer's bucket hooks fire there, in the usual
//     order (torch.utils.checkpoint's reentrant kind accumulates inside instead, which is why
//     DDP needs static_graph with it).
// LibTorch has no C++ torch.utils.checkpoint (https://github.com/pytorch/pytorch/issues/52744).
// This is the reentrant kind: a backward node of its own whose apply() calls the autograd engine
// again on the copy. The segment's input is kept; what the segment computes inside is not. The node
// is made whenever grad mode is on, also for an input that needs no gradient: the parameters inside
// still do. Equality: the recomputed forward runs the same kernels on the same input with the same
// random numbers, so on the CPU in fp32 the gradients equal a run without recomputation bit for bit
// (py.train.recompute.*) where each weight is used in one segment (a transformer block, a
// graph layer); an LSTM's time segments share their weights, see Note [LSTM time segments].
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

namespace mb::model {

using Segment = std::function<at::Tensor(const at::Tensor&)>;
using SegmentOfMany = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// segment(input), keeping only `input` for the backward pass, which runs segment again. Without
// grad mode (evaluation, sampling) it is segment(input).
// `parameters`: every tensor that needs a gradient which the segment uses besides `input` (its
// module's parameters); their gradients leave through the segment's backward node, and one the
// segment uses but was not given is an error in the backward pass.
at::Tensor recomputed(const Segment& segment, const at::Tensor& input,
                      const std::vector<at::Tensor>& parameters);

// The same for a segment of several inputs and outputs (an LSTM's time segment: the input slice
// and the (h, c) it starts from, to the (h, c) it ends with). Inputs that need no gradient get
// none; an output whose gradient is undefined is left out of the backward pass.
std::vector<at::Tensor> recomputedMany(const SegmentOfMany& segment,
                                       const std::vector<at::Tensor>& inputs,
                                       const std::vector<at::Tensor>& parameters);

}  // namespace mb::model
