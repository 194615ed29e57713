#include "model/parts/Heads.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

namespace mb::model {

torch::nn::Sequential makeHead(std::int64_t in, std::int64_t hidden, std::int64_t out,
                               double dropout) {
  torch::nn::Sequential head;
  if (hidden <= 0) {
    head->push_back(torch::nn::Linear(in, out));
    return head;
  }
  head->push_back(torch::nn::Linear(in, hidden));
  head->push_back(torch::nn::GELU());
  head->push_back(torch::nn::Dropout(dropout));
  head->push_back(torch::nn::Linear(hidden, out));
  return head;
}

}  // namespace mb::model
