#include "model/Generate.h"

#include <algorithm>
#include <limits>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>

#include "common/Error.h"
#include "model/kinds/Gpt.h"

namespace mb::model {
namespace {

// Eval mode for the scope of a generation; the previous mode comes back afterwards.
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Gpt& model) : model_(model), wasTraining_(model.is_training()) {
    model_.eval();
  }
  ~EvalModeGuard() { model_.train(wasTraining_); }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  Gpt& model_;
  bool wasTraining_;
};

// Next-token logits [B, vocab] for `sequence` [B, T], through the cache when there is one.
// The cached path feeds only what the cache has not seen; once the sequence outgrows the
// context the window slides, positions shift, and every key changes, so it starts over on
// the last `context` tokens, exactly as the uncached path does.
class NextToken {
 public:
  NextToken(Gpt& model, bool useCache) : model_(model), useCache_(useCache) {
    if (useCache_) cache_ = model.newCache();
  }

  at::Tensor operator()(const at::Tensor& sequence) {
    std::int64_t context = model_.options().context;
    std::int64_t length = sequence.size(1);
    at::Tensor window =
        sequence.narrow(1, std::max<std::int64_t>(0, length - context), std::min(length, context));
    if (!useCache_) return lastLogits(model_.logits(window));
    if (length > context) {
      cache_.clear();
      return lastLogits(model_.logits(window, &cache_));
    }
    at::Tensor fresh = sequence.narrow(1, cache_.length, length - cache_.length);  // unseen
    return lastLogits(model_.logits(fresh, &cache_));
  }

 private:
  static at::Tensor lastLogits(const at::Tensor& logits) {
    return logits.select(1, logits.size(1) - 1).to(at::kFloat);  // [B, vocab]
  }

  Gpt& model_;
  bool useCache_;
  KvCache cache_;
};

// Picks the next token of each row from logits [B, vocab] -> [B] int64 on the CPU.
at::Tensor pick(const at::Tensor& logits, const SamplingOptions& options, at::Generator& rng) {
  at::Tensor scores = logits.to(at::kCPU);
  if (options.temperature <= 0.0) return scores.argmax(-1);
  scores = scores / options.temperature;
  if (options.topK > 0 && options.topK < scores.size(-1)) {
    at::Tensor kth = std::get<0>(scores.topk(options.topK, -1)).narrow(-1, options.topK - 1, 1);
    scores = scores.masked_fill(scores < kth, -std::numeric_limits<float>::infinity());
  }
  return at::multinomial(at::softmax(scores, -1), 1, false, rng).squeeze(1);
}

bool endsWith(const std::string& text, const std::string& suffix) {
  return !suffix.empty() && text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<Generation> generate(Gpt& model, const at::Tensor& prompts,
                                 const SamplingOptions& options) {
  if (prompts.dim() != 2 || prompts.size(1) < 1)
    throw RuntimeError("generate: prompts must be [B, T] tokens with T >= 1");
  EvalModeGuard evalMode(model);
  at::NoGradGuard noGrad;
  at::Device device = model.parameters().front().device();
  at::Generator rng = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  NextToken next(model, options.useKvCache);

  std::int64_t rows = prompts.size(0);
  std::vector<Generation> out(static_cast<std::size_t>(rows));
  at::Tensor sequence = prompts.to(device, at::kLong);  // [B, T0 + generated]
  std::int64_t running = rows;
  for (std::int64_t step = 0; step < options.maxNewTokens && running > 0; ++step) {
    at::Tensor chosen = pick(next(sequence), options, rng);  // [B] on the CPU
    auto* ids = chosen.data_ptr<std::int64_t>();
    for (std::int64_t r = 0; r < rows; ++r) {
      Generation& g = out[static_cast<std::size_t>(r)];
      if (g.stopped) continue;
      g.tokens.push_back(ids[r]);
      g.text.push_back(static_cast<char>(ids[r] & 0xff));
      bool stopToken = std::find(options.stopTokens.begin(), options.stopTokens.end(), ids[r]) !=
                       options.stopTokens.end();
      if (stopToken || endsWith(g.text, options.stopString)) {
        g.stopped = true;
        --running;
      }
    }
    sequence = at::cat({sequence, chosen.to(device).unsqueeze(1)}, 1);
  }
  return out;
}

namespace {

Gpt& generator(Model& model) {
  auto* gpt = dynamic_cast<Gpt*>(&model);
  if (!gpt)
    throw RuntimeError("sampling needs a gpt model (model.kind = gpt), this one is " +
                       model.kind());
  return *gpt;
}

}  // namespace

std::vector<Generation> generate(Model& model, const at::Tensor& prompts,
                                 const SamplingOptions& options) {
  return generate(generator(model), prompts, options);
}

Generation generateText(Model& model, const std::string& prompt, const SamplingOptions& options) {
  Gpt* gpt = &generator(model);
  if (prompt.empty()) throw ConfigError("--prompt is empty: give at least one character");
  std::vector<std::int64_t> tokens = encodeBytes(prompt, gpt->options().vocab);
  at::Tensor prompts = at::tensor(tokens, at::kLong).unsqueeze(0);  // [1, T0]
  return generate(*gpt, prompts, options).front();
}

std::vector<std::int64_t> encodeBytes(const std::string& text, std::int64_t vocab) {
  std::vector<std::int64_t> tokens;
  tokens.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    auto byte = static_cast<std::int64_t>(static_cast<unsigned char>(text[i]));
    if (byte >= vocab)
      throw ConfigError("--prompt: byte " + std::to_string(byte) + " at position " +
                            std::to_string(i) + " is outside the model's vocabulary of " +
                            std::to_string(vocab) + " tokens",
                        "use characters the training text contained");
    tokens.push_back(byte);
  }
  return tokens;
}

std::string decodeBytes(const std::vector<std::int64_t>& tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (auto token : tokens)
    text.push_back(static_cast<char>(token & 0xff));
  return text;
}

}  // namespace mb::model
