#pragma once
// The MLP head shared by the lstm and mlp models.
#include <cstdint>

#include <torch/nn/modules/container/sequential.h>

namespace mb::model {

// Linear(in, hidden) -> GELU -> Dropout -> Linear(hidden, out), or Linear(in, out) when
// hidden = 0. State_dict names are those of the equal torch.nn.Sequential: `0.weight`,
// `3.weight` (or `0.weight` alone).
torch::nn::Sequential makeHead(std::int64_t in, std::int64_t hidden, std::int64_t out,
                               double dropout);

}  // namespace mb::model
