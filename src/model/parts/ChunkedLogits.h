#pragma once
// Note [Chunked logits]
// A language model's logits are [B, T, vocab] values: for GPT-2's vocabulary of 50304 at a
// context of 1024, 206 MB a sample in fp32, more than all of its other activations, and 53 GB
// for an evaluation batch of 256. So kind: gpt never makes them whole. Its forward ends at the
// final LayerNorm's [B, T, C]; the loss and the metrics run the tied head (hidden x wte^T) over
// chunks of at most kLogitsChunkBytes of fp32 logits, and take each chunk's cross-entropy and
// argmax before the next chunk exists.
// In grad mode each chunk's gradient is taken in the forward pass too, where it is known: the
// gradient of a summed cross-entropy in the logits is softmax(logits) - onehot(target), so
//   d hidden = g x W   and   d W += g^T x hidden   (g: the chunk's [rows, vocab] gradient),
// and the backward node only scales the two by the loss's gradient (the 1 / token count and
// the loss scale). That is the computation of the whole logits' backward, chunk by chunk: the
// same matrix products, no recomputation (Liger Kernel's fused linear cross-entropy does the
// same). Under autocast the products run in its dtype, as the whole computation's would, and
// the softmax and the sums in fp32.
// Equality with the whole computation, loss and gradients, is tested in fp32
// (tests/unit/ChunkedLogitsTest.cpp); parity with PyTorch's nn.CrossEntropyLoss in
// py.model.parity.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace mb::model {

// What one chunk of fp32 logits may take.
constexpr std::int64_t kLogitsChunkBytes = std::int64_t{64} << 20;

// Rows of hidden states per chunk for a vocabulary of `vocab`: at least 1.
std::int64_t logitsChunkRows(std::int64_t vocab);

// The cross-entropy of logits = hidden x weight^T against `targets`, summed over the rows:
// hidden [N, C], weight [vocab, C], targets [N] int64 -> a scalar in fp32. Differentiable in
// hidden and weight (Note [Chunked logits]). chunkRows <= 0: logitsChunkRows(vocab).
at::Tensor chunkedCrossEntropySum(const at::Tensor& hidden, const at::Tensor& weight,
                                  const at::Tensor& targets, std::int64_t chunkRows = 0);

// The rows whose largest logit is at the target, as a scalar fp32 count. No gradient.
at::Tensor chunkedArgmaxMatches(const at::Tensor& hidden, const at::Tensor& weight,
                                const at::Tensor& targets, std::int64_t chunkRows = 0);

}  // namespace mb::model
