#include "model/kinds/Gpt.h"

#include <cmath>
#include <optional>

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "model/Recompute.h"
#include "model/parts/ChunkedLogits.h"

namespace mb::model {
namespace detail {
namespace {

// torch::nn::Linear's forward in LibTorch 1.13 is matmul followed by a separate bias add; the
// fused at::linear (what Python's nn.Linear calls) folds [B, T, C] into one addmm.
at::Tensor linear(const torch::nn::Linear& layer, const at::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias);
}

}  // namespace

GptLayerNormImpl::GptLayerNormImpl(std::int64_t width, bool bias) {
  weight = register_parameter("weight", at::ones({width}));
  if (bias) this->bias = register_parameter("bias", at::zeros({width}));
}

at::Tensor GptLayerNormImpl::forward(const at::Tensor& x) {
  return at::layer_norm(x, {weight.size(0)}, weight, bias, 1e-5);
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptOptions& options)
    : heads_(options.heads), dropout_(options.dropout) {
  std::int64_t c = options.width;
  c_attn_ = register_module(
      "c_attn", torch::nn::Linear(torch::nn::LinearOptions(c, 3 * c).bias(options.bias)));
  c_proj_ = register_module("c_proj",
                            torch::nn::Linear(torch::nn::LinearOptions(c, c).bias(options.bias)));
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x, KvCache* cache,
                                            std::size_t layer) {
  std::int64_t b = x.size(0), t = x.size(1), c = x.size(2), d = c / heads_;
  auto qkv = linear(c_attn_, x).split(c, 2);  // 3 x [B, T, C]
  auto heads = [&](const at::Tensor& y) { return y.view({b, t, heads_, d}).transpose(1, 2); };
  at::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);  // [B, H, T, D]
  std::int64_t past = 0;
  if (cache) {
    past = cache->length;
    auto& keys = cache->keys[layer];
    auto& values = cache->values[layer];
    if (!keys.defined()) {
      keys = at::empty({b, heads_, cache->capacity, d}, k.options());
      values = at::empty({b, heads_, cache->capacity, d}, v.options());
    }
    keys.narrow(2, past, t).copy_(k);
    values.narrow(2, past, t).copy_(v);
    k = keys.narrow(2, 0, past + t);  // [B, H, past + T, D]
    v = values.narrow(2, 0, past + t);
  }
  // Query i sits at position past + i and may see keys 0 .. past + i. The fused kernels'
  // is_causal aligns the mask top-left, which is right only when there is no past; one new
  // query sees every key; a chunk after a past needs the explicit mask.
  bool causal = past == 0;
  at::Tensor mask;
  if (past > 0 && t > 1) mask = at::ones({t, past + t}, x.options().dtype(at::kBool)).tril(past);
  at::Tensor y = compat::scaledDotProductAttention(q, k, v, mask, causal, dropout_, is_training());
  y = y.transpose(1, 2).contiguous().view({b, t, c});  // [B, T, C]
  return at::dropout(linear(c_proj_, y), dropout_, is_training());
}

GptMlpImpl::GptMlpImpl(const GptOptions& options) : dropout_(options.dropout) {
  std::int64_t c = options.width;
  c_fc_ = register_module("c_fc",
                          torch::nn::Linear(torch::nn::LinearOptions(c, 4 * c).bias(options.bias)));
  c_proj_ = register_module(
      "c_proj", torch::nn::Linear(torch::nn::LinearOptions(4 * c, c).bias(options.bias)));
}

at::Tensor GptMlpImpl::forward(const at::Tensor& x) {
  return at::dropout(linear(c_proj_, at::gelu(linear(c_fc_, x))), dropout_, is_training());
}

BlockImpl::BlockImpl(const GptOptions& options) {
  ln_1_ = register_module("ln_1", GptLayerNorm(options.width, options.bias));
  attn_ = register_module("attn", CausalSelfAttention(options));
  ln_2_ = register_module("ln_2", GptLayerNorm(options.width, options.bias));
  mlp_ = register_module("mlp", GptMlp(options));
}

at::Tensor BlockImpl::forward(const at::Tensor& x, KvCache* cache, std::size_t layer) {
  at::Tensor y = x + attn_->forward(ln_1_->forward(x), cache, layer);
  return y + mlp_->forward(ln_2_->forward(y));
}

TransformerImpl::TransformerImpl(const GptOptions& options) {
  wte = register_module("wte", torch::nn::Embedding(options.vocab, options.width));
  wpe = register_module("wpe", torch::nn::Embedding(options.context, options.width));
  torch::nn::ModuleList blocks;
  for (std::int64_t i = 0; i < options.layers; ++i) {
    h.push_back(Block(options));
    blocks->push_back(h.back());
  }
  register_module("h", blocks);
  ln_f = register_module("ln_f", GptLayerNorm(options.width, options.bias));
}

}  // namespace detail

Gpt::Gpt(const GptOptions& options) : options_(options) {
  transformer_ = register_module("transformer", detail::Transformer(options));
  initWeights();
}

void Gpt::initWeights() {
  at::NoGradGuard noGrad;
  const double residualStd = 0.02 / std::sqrt(2.0 * static_cast<double>(options_.layers));
  auto endsWith = [](const std::string& name, const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (auto& entry : named_parameters()) {
    const std::string& name = entry.key();
    at::Tensor& p = entry.value();
    if (endsWith(name, ".bias")) {
      p.zero_();
    } else if (name.find(".ln_") != std::string::npos) {
      p.fill_(1.0);
    } else if (endsWith(name, "c_proj.weight")) {
      p.normal_(0.0, residualStd);
    } else {
      p.normal_(0.0, 0.02);  // wte, wpe, c_attn, c_fc
    }
  }
}

KvCache Gpt::newCache() const {
  KvCache cache;
  cache.keys.resize(static_cast<std::size_t>(options_.layers));
  cache.values.resize(static_cast<std::size_t>(options_.layers));
  cache.capacity = options_.context;
  return cache;
}

at::Tensor Gpt::hidden(const at::Tensor& tokens, KvCache* cache) {
  std::int64_t t = tokens.size(1);
  std::int64_t past = cache ? cache->length : 0;
  if (past + t > options_.context)
    throw RuntimeError("gpt: " + std::to_string(past + t) + " positions exceed the context of " +
                       std::to_string(options_.context) + " (data.context)");
  at::Tensor ids = tokens.to(at::kLong);
  at::Tensor positions = at::arange(past, past + t, ids.options());  // [T]
  at::Tensor x = transformer_->wte->forward(ids) + transformer_->wpe->forward(positions);
  x = at::dropout(x, options_.dropout, is_training());  // [B, T, C]
  for (std::size_t i = 0; i < transformer_->h.size(); ++i) {
    detail::Block block = transformer_->h[i];  // a holder: the segment keeps it alive
    const bool recompute = recomputeEvery_ > 0 && cache == nullptr &&
                           static_cast<std::int64_t>(i) % recomputeEvery_ == 0;
    x = recompute ? recomputed(
                        [block, i](const at::Tensor& in) mutable {
                          return block->forward(in, nullptr, i);
                        },
                        x, block->parameters())
                  : block->forward(x, cache, i);
  }
  if (cache) cache->length += t;
  return transformer_->ln_f->forward(x);  // [B, T, C]
}

at::Tensor Gpt::headLogits(const at::Tensor& hidden) const {
  return at::linear(hidden, transformer_->wte->weight);  // lm_head, tied: [B, T, vocab]
}

at::Tensor Gpt::logits(const at::Tensor& tokens, KvCache* cache) {
  return headLogits(hidden(tokens, cache));
}

at::Tensor Gpt::forward(const data::Batch& batch) {
  if (batch.inputs.size() != 1 || batch.inputs[0].dim() != 2)
    throw RuntimeError("gpt: expects one input of tokens [B, T]");
  return hidden(batch.inputs[0]);  // the logits are made by chunks (Note [Chunked logits])
}

namespace {

void checkTokenTargets(const at::Tensor& output, const at::Tensor& targets) {
  if (!targets.defined() || targets.dim() != 2 || targets.size(0) != output.size(0) ||
      targets.size(1) != output.size(1))
    throw RuntimeError("gpt: targets must be [B, T] tokens matching the hidden states [B, T, C]");
}

}  // namespace

at::Tensor Gpt::lossSum(const at::Tensor& output, const data::Batch& batch) {
  checkTokenTargets(output, batch.targets);
  return chunkedCrossEntropySum(output.reshape({-1, output.size(-1)}), transformer_->wte->weight,
                                batch.targets.reshape({-1}));
}

NamedTensors Gpt::metricSums(const at::Tensor& output, const data::Batch& batch) {
  checkTokenTargets(output, batch.targets);
  return {
      {"accuracy", chunkedArgmaxMatches(output.reshape({-1, output.size(-1)}),
                                        transformer_->wte->weight, batch.targets.reshape({-1}))}};
}

GptOptions gptOptions(const ModelConfig& config, const data::DataInfo& info) {
  GptOptions options;
  if (info.inputs.size() != 1 || info.inputs[0].window < 1)
    throw ConfigError("model.kind = gpt needs the tokens layout with data.context >= 1");
  options.context = info.inputs[0].window;
  options.vocab = config.vocabSize > 0 ? config.vocabSize : info.vocabSize;
  if (options.vocab < 1)
    throw ConfigError("model.vocab_size is 0 and " + info.path + " has no vocab_size attribute",
                      "set model.vocab_size");
  if (options.vocab < info.vocabSize)
    throw ConfigError("model.vocab_size = " + std::to_string(config.vocabSize) +
                          " is smaller than the vocab_size " + std::to_string(info.vocabSize) +
                          " of " + info.path,
                      "raise model.vocab_size or leave it 0 to take it from the data");
  options.width = config.hidden;
  options.layers = config.layers;
  options.heads = config.heads;
  options.dropout = config.dropout;
  options.bias = config.bias;
  if (options.width % options.heads != 0)
    throw ConfigError("model.hidden = " + std::to_string(options.width) +
                      " must be divisible by model.heads = " + std::to_string(options.heads));
  return options;
}

ModelKind gptModelKind() {
  ModelKind kind;
  kind.name = "gpt";
  kind.summary = "a decoder-only transformer (nanoGPT / GPT-2) over a token stream";
  kind.layouts = {"tokens"};
  kind.languageModel = true;
  kind.build = [](const ModelConfig& config, const data::DataInfo& info) {
    return std::make_shared<Gpt>(gptOptions(config, info));
  };
  kind.checkConfig = [](const Config& c) -> std::optional<std::string> {
    if (c.model.heads > 0 && c.model.hidden % c.model.heads != 0)
      return "model.hidden = " + std::to_string(c.model.hidden) +
             " must be divisible by model.heads = " + std::to_string(c.model.heads);
    return std::nullopt;
  };
  return kind;
}

}  // namespace mb::model
