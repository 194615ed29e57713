#pragma once
// model.kind = gpt: a decoder-only transformer in the layout of nanoGPT / GPT-2. Token and
// position embeddings, pre-LayerNorm blocks of causal self-attention and a GELU MLP, a final
// LayerNorm, and an output projection tied to the token embedding. GPT-2 initialisation:
// normal(0, 0.02), residual projections (c_proj) normal(0, 0.02 / sqrt(2 x layers)).
//
// state_dict names (nanoGPT's; HF GPT-2 has the same names, but its Conv1D weights are
// stored transposed, [in, out]):
//   transformer.wte.weight [vocab, C]       transformer.wpe.weight [context, C]
//   transformer.h.<i>.ln_1.weight/.bias     transformer.h.<i>.attn.c_attn.weight [3C, C] /.bias
//   transformer.h.<i>.attn.c_proj.weight [C, C] /.bias
//   transformer.h.<i>.ln_2.weight/.bias     transformer.h.<i>.mlp.c_fc.weight [4C, C] /.bias
//   transformer.h.<i>.mlp.c_proj.weight [C, 4C] /.bias
//   transformer.ln_f.weight/.bias           lm_head.weight (= transformer.wte.weight, tied)
// Biases (of the linears and LayerNorms) exist only with model.bias = true.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/Model.h"
#include "model/ModelRegistry.h"

namespace mb::model {

struct GptOptions {
  std::int64_t vocab = 256;
  std::int64_t context = 128;  // positions the model sees (data.context)
  std::int64_t width = 128;    // C
  std::int64_t layers = 4;
  std::int64_t heads = 4;
  double dropout = 0.0;
  bool bias = true;
};

// Keys and values of the positions decoded so far, for incremental decoding (Generate.h).
// Allocated on first use with the dtype and device of the keys (bf16 under autocast).
struct KvCache {
  std::vector<at::Tensor> keys;    // per block [B, heads, context, C / heads]
  std::vector<at::Tensor> values;  // per block [B, heads, context, C / heads]
  std::int64_t length = 0;         // positions filled
  std::int64_t capacity = 0;       // context

  void clear() { length = 0; }
};

namespace detail {

// LayerNorm whose bias is optional (nanoGPT's bias = false): state_dict names weight [, bias].
class GptLayerNormImpl : public torch::nn::Module {
 public:
  GptLayerNormImpl(std::int64_t width, bool bias);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;  // [C]
  at::Tensor bias;    // [C] or undefined
};
TORCH_MODULE(GptLayerNorm);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GptOptions& options);
  // x [B, T, C] at positions cache->length.. (0.. without a cache) -> [B, T, C].
  at::Tensor forward(const at::Tensor& x, KvCache* cache, std::size_t layer);

 private:
  std::int64_t heads_;
  double dropout_;
  torch::nn::Linear c_attn_{nullptr};  // [3C, C]: q, k, v
  torch::nn::Linear c_proj_{nullptr};  // [C, C]
};
TORCH_MODULE(CausalSelfAttention);

class GptMlpImpl : public torch::nn::Module {
 public:
  explicit GptMlpImpl(const GptOptions& options);
  at::Tensor forward(const at::Tensor& x);

 private:
  double dropout_;
  torch::nn::Linear c_fc_{nullptr};    // [4C, C]
  torch::nn::Linear c_proj_{nullptr};  // [C, 4C]
};
TORCH_MODULE(GptMlp);

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GptOptions& options);
  at::Tensor forward(const at::Tensor& x, KvCache* cache, std::size_t layer);

 private:
  GptLayerNorm ln_1_{nullptr};
  CausalSelfAttention attn_{nullptr};
  GptLayerNorm ln_2_{nullptr};
  GptMlp mlp_{nullptr};
};
TORCH_MODULE(Block);

// The `transformer` submodule: wte, wpe, h, ln_f.
class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const GptOptions& options);
  torch::nn::Embedding wte{nullptr};  // [vocab, C]
  torch::nn::Embedding wpe{nullptr};  // [context, C]
  std::vector<Block> h;
  GptLayerNorm ln_f{nullptr};
};
TORCH_MODULE(Transformer);

}  // namespace detail

class Gpt : public Model, public Recomputable {
 public:
  explicit Gpt(const GptOptions& options);

  // batch.inputs[0]: tokens [B, T] int64, T <= context -> the final LayerNorm's [B, T, C]: the
  // loss and metrics make the logits from them by chunks (Note [Chunked logits]).
  at::Tensor forward(const data::Batch& batch) override;
  // Cross-entropy summed over every position of every sample; targets [B, T].
  at::Tensor lossSum(const at::Tensor& output, const data::Batch& batch) override;
  std::int64_t termsPerSample() const override { return options_.context; }
  // {"accuracy"}: next-token predictions that match the target, summed over positions.
  NamedTensors metricSums(const at::Tensor& output, const data::Batch& batch) override;
  std::vector<std::string> metricNames() const override { return {"accuracy"}; }
  std::string kind() const override { return "gpt"; }
  std::vector<std::pair<std::string, std::string>> tiedWeights() const override {
    return {{"lm_head.weight", "transformer.wte.weight"}};
  }

  // tokens [B, T] -> logits [B, T, vocab]. With a cache, the tokens continue the sequence
  // held in it (positions cache->length ..), and their keys and values are appended.
  at::Tensor logits(const at::Tensor& tokens, KvCache* cache = nullptr);
  // The same up to the final LayerNorm: [B, T, C].
  at::Tensor hidden(const at::Tensor& tokens, KvCache* cache = nullptr);
  // hidden [..., C] -> logits [..., vocab] through the tied head.
  at::Tensor headLogits(const at::Tensor& hidden) const;
  KvCache newCache() const;

  const GptOptions& options() const { return options_; }

  // Recomputable: each transformer block is a segment (Note [Activation recomputation]).
  void setRecomputeEvery(std::int64_t every) override { recomputeEvery_ = every; }
  std::int64_t segmentCount() const override { return options_.layers; }
  std::string segmentName() const override { return "transformer blocks"; }

 private:
  void initWeights();

  GptOptions options_;
  detail::Transformer transformer_{nullptr};
  std::int64_t recomputeEvery_ = 0;
};

GptOptions gptOptions(const ModelConfig& config, const data::DataInfo& info);

// model.kind = gpt, for ModelRegistry.cpp.
ModelKind gptModelKind();

}  // namespace mb::model
