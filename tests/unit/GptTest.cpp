// gpt: causal masking, the KV cache against the uncached path, generation, bf16 autocast. On
// test::device() (Note [Test device]).
#include <gtest/gtest.h>

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>

#include "common/Error.h"
#include "common/TorchCompat.h"
#include "model/Generate.h"
#include "model/Model.h"
#include "model/kinds/Gpt.h"
#include "tests/unit/ModelFixtures.h"

namespace mb::model {
namespace {

std::shared_ptr<Gpt> tinyGpt(std::int64_t context = 12, std::int64_t vocab = 40,
                             std::uint64_t seed = 5) {
  auto model = test::deviceModel(test::gptConfig(32, 2, 4), test::tokenInfo(context, vocab), seed);
  auto gpt = std::dynamic_pointer_cast<Gpt>(model);
  EXPECT_TRUE(gpt);
  gpt->eval();
  return gpt;
}

double maxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(GptCausal, OutputAtTDoesNotDependOnLaterTokens) {
  at::manual_seed(1);
  auto gpt = tinyGpt();
  at::NoGradGuard noGrad;
  at::Tensor tokens = at::randint(40, {2, 12}, at::kLong).to(test::device());
  at::Tensor base = gpt->logits(tokens);  // [2, 12, 40]
  for (std::int64_t t = 0; t + 1 < 12; ++t) {
    at::Tensor changed = tokens.clone();
    changed.narrow(1, t + 1, 12 - t - 1).random_(40);
    changed.select(1, t + 1).add_(1).remainder_(40);  // at least one later token differs
    at::Tensor out = gpt->logits(changed);
    EXPECT_LT(maxDiff(out.narrow(1, 0, t + 1), base.narrow(1, 0, t + 1)),
              test::tolerance(1e-6, 1e-5))
        << "t = " << t;
    // The test can fail: the changed position itself does see the change.
    EXPECT_GT(maxDiff(out.select(1, t + 1), base.select(1, t + 1)), 1e-4) << "t = " << t;
  }
}

TEST(GptCache, IncrementalLogitsMatchFullForward) {
  at::manual_seed(2);
  auto gpt = tinyGpt();
  at::NoGradGuard noGrad;
  at::Tensor tokens = at::randint(40, {3, 12}, at::kLong).to(test::device());
  at::Tensor full = gpt->logits(tokens);
  KvCache cache = gpt->newCache();
  // A prompt (no past, causal), a chunk after a past (explicit mask), then one at a time.
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces{
      {0, 5}, {5, 4}, {9, 1}, {10, 1}, {11, 1}};
  for (auto [start, length] : pieces) {
    at::Tensor part = gpt->logits(tokens.narrow(1, start, length), &cache);
    // The cached path runs other kernels (explicit mask, shorter queries) than the full one.
    EXPECT_LT(maxDiff(part, full.narrow(1, start, length)), test::tolerance(1e-5, 1e-4))
        << "at " << start;
  }
  EXPECT_EQ(cache.length, 12);
  EXPECT_THROW(gpt->logits(tokens.narrow(1, 0, 1), &cache), RuntimeError);  // context is full
}

TEST(GptGenerate, GreedyWithAndWithoutCacheAgree) {
  at::manual_seed(3);
  auto gpt = tinyGpt(/*context=*/10);
  at::Tensor prompts = at::randint(40, {3, 4}, at::kLong).to(test::device());
  SamplingOptions options;
  options.maxNewTokens = 20;  // runs past the context: the window slides
  options.useKvCache = true;
  auto cached = generate(*gpt, prompts, options);
  options.useKvCache = false;
  auto uncached = generate(*gpt, prompts, options);
  ASSERT_EQ(cached.size(), 3u);
  for (std::size_t r = 0; r < cached.size(); ++r) {
    EXPECT_EQ(cached[r].tokens.size(), 20u);
    EXPECT_EQ(cached[r].tokens, uncached[r].tokens) << "row " << r;
  }
}

TEST(GptGenerate, SampledWithAndWithoutCacheAgreeForOneSeed) {
  at::manual_seed(4);
  auto gpt = tinyGpt();
  at::Tensor prompts = at::randint(40, {2, 3}, at::kLong).to(test::device());
  SamplingOptions options;
  options.maxNewTokens = 8;
  options.temperature = 1.5;
  options.topK = 10;
  options.seed = 99;
  auto a = generate(*gpt, prompts, options);
  options.useKvCache = false;
  auto b = generate(*gpt, prompts, options);
  options.seed = 100;
  auto c = generate(*gpt, prompts, options);
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  EXPECT_EQ(a[1].tokens, b[1].tokens);
  EXPECT_TRUE(a[0].tokens != c[0].tokens || a[1].tokens != c[1].tokens);
}

TEST(GptGenerate, TopKOneIsGreedy) {
  at::manual_seed(5);
  auto gpt = tinyGpt();
  at::Tensor prompts = at::randint(40, {2, 3}, at::kLong).to(test::device());
  SamplingOptions greedy;
  greedy.maxNewTokens = 6;
  SamplingOptions topOne = greedy;
  topOne.temperature = 0.7;
  topOne.topK = 1;
  auto a = generate(*gpt, prompts, greedy);
  auto b = generate(*gpt, prompts, topOne);
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  EXPECT_EQ(a[1].tokens, b[1].tokens);
}

TEST(GptGenerate, StopsAtStopTokenAndStopString) {
  at::manual_seed(6);
  auto gpt = tinyGpt();
  SamplingOptions options;
  options.maxNewTokens = 12;
  at::Tensor prompt = at::randint(40, {1, 3}, at::kLong).to(test::device());
  auto free = generate(*gpt, prompt, options).front();
  ASSERT_EQ(free.tokens.size(), 12u);
  EXPECT_FALSE(free.stopped);
  // Stop at the token the free run produced third: the run ends there, keeping it.
  options.stopTokens = {free.tokens[2]};
  auto first = std::find(free.tokens.begin(), free.tokens.end(), free.tokens[2]);
  auto stopped = generate(*gpt, prompt, options).front();
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.tokens, std::vector<std::int64_t>(free.tokens.begin(), first + 1));
  options.stopTokens.clear();
  options.stopString = free.text.substr(1, 2);
  auto byString = generate(*gpt, prompt, options).front();
  EXPECT_TRUE(byString.stopped);
  EXPECT_EQ(byString.text.substr(byString.text.size() - 2), options.stopString);
  EXPECT_LE(byString.tokens.size(), 3u);
}

TEST(GptGenerate, BatchRowsEqualSingleRows) {
  at::manual_seed(7);
  auto gpt = tinyGpt();
  at::Tensor prompts = at::randint(40, {3, 4}, at::kLong).to(test::device());
  SamplingOptions options;
  options.maxNewTokens = 7;
  auto batch = generate(*gpt, prompts, options);
  for (std::int64_t r = 0; r < 3; ++r) {
    auto single = generate(*gpt, prompts.narrow(0, r, 1), options).front();
    EXPECT_EQ(batch[static_cast<std::size_t>(r)].tokens, single.tokens) << "row " << r;
  }
}

TEST(GptGenerate, TextPromptsAreBytesWithinTheVocabulary) {
  auto gpt = tinyGpt(12, 128);
  gpt->train();
  SamplingOptions options;
  options.maxNewTokens = 3;
  auto out = generateText(*gpt, "12+3=", options);
  EXPECT_EQ(out.tokens.size(), 3u);
  EXPECT_EQ(out.text, decodeBytes(out.tokens));
  EXPECT_TRUE(gpt->is_training());  // the mode is restored
  EXPECT_THROW(generateText(*gpt, "caf\xc3\xa9", options), ConfigError);
  EXPECT_EQ(encodeBytes("a=", 256), (std::vector<std::int64_t>{97, 61}));
}

TEST(GptModel, TiedHeadIsOneParameterButTwoStateDictNames) {
  auto gpt = tinyGpt();
  auto names = gpt->named_parameters();
  EXPECT_TRUE(names.contains("transformer.wte.weight"));
  EXPECT_FALSE(names.contains("lm_head.weight"));
  EXPECT_FALSE(names.contains("transformer.h.0.attn.bias"));  // no mask buffer
  ASSERT_EQ(gpt->tiedWeights().size(), 1u);
  EXPECT_EQ(gpt->tiedWeights()[0].first, "lm_head.weight");
  // 2 blocks of 12 C^2 + 13 C, embeddings, and ln_f.
  std::int64_t c = 32, expected = 2 * (12 * c * c + 13 * c) + 40 * c + 12 * c + 2 * c;
  std::int64_t count = 0;
  for (const auto& p : gpt->parameters())
    count += p.numel();
  EXPECT_EQ(count, expected);
}

TEST(GptModel, LossIsCrossEntropySumOverTokens) {
  at::manual_seed(8);
  auto gpt = tinyGpt();
  auto batch = test::randomBatch(test::tokenInfo(12, 40), 2);
  at::Tensor hidden = gpt->forward(batch);  // the logits are made by chunks from these
  EXPECT_EQ(hidden.sizes(), (at::IntArrayRef{2, 12, 32}));
  at::Tensor logits = gpt->headLogits(hidden);
  EXPECT_EQ(logits.sizes(), (at::IntArrayRef{2, 12, 40}));
  EXPECT_TRUE(at::allclose(logits, gpt->logits(batch.inputs[0])));
  EXPECT_EQ(gpt->termsPerSample(), 12);
  // An untrained model is near uniform: ln(40) per token.
  EXPECT_NEAR(gpt->lossSum(hidden, batch).item<double>() / 24.0, std::log(40.0), 0.1);
  auto metrics = gpt->metricSums(hidden, batch);
  ASSERT_EQ(metrics.size(), 1u);
  double correct = metrics[0].second.item<double>();
  EXPECT_EQ(correct, logits.argmax(-1).eq(batch.targets).sum().item<double>());
}

TEST(GptModel, VocabularyMustCoverTheData) {
  auto config = test::gptConfig();
  config.vocabSize = 20;
  EXPECT_THROW(buildModel(config, test::tokenInfo(12, 40), 1), ConfigError);
  config.vocabSize = 64;  // padded up is fine (GPT-2's 50304)
  auto model = test::deviceModel(config, test::tokenInfo(12, 40), 1);
  EXPECT_EQ(std::dynamic_pointer_cast<Gpt>(model)->options().vocab, 64);
  auto info = test::tokenInfo(12, 0);
  EXPECT_THROW(buildModel(test::gptConfig(), info, 1), ConfigError);
}

TEST(GptModel, DropoutActsOnlyInTraining) {
  at::manual_seed(10);
  auto config = test::gptConfig();
  config.dropout = 0.2;
  auto model = test::deviceModel(config, test::tokenInfo(12, 40), 1);
  auto batch = test::randomBatch(test::tokenInfo(12, 40), 2);
  model->eval();
  at::Tensor a = model->forward(batch), b = model->forward(batch);
  EXPECT_TRUE(at::equal(a, b));
  model->train();
  at::Tensor c = model->forward(batch);
  EXPECT_FALSE(at::allclose(a, c));
  model->lossSum(c, batch).backward();
}

// On the CPU, or on CUDA under MEGABATCH_TEST_DEVICE=cuda.
TEST(GptAutocast, Bf16TrainsCloseToFp32) {
  at::manual_seed(9);
  auto gpt = tinyGpt();
  gpt->train();
  auto batch = test::randomBatch(test::tokenInfo(12, 40), 4);
  double fp32 = gpt->lossSum(gpt->forward(batch), batch).item<double>();
  const c10::DeviceType where = test::device().type();
  compat::setAutocast(where, true, at::kBFloat16);
  at::Tensor hidden = gpt->forward(batch);
  at::Tensor logits = gpt->headLogits(hidden);
  at::Tensor loss = gpt->lossSum(hidden, batch);
  loss.backward();
  compat::setAutocast(where, false, at::kBFloat16);
  compat::clearAutocastCache();
  EXPECT_EQ(logits.scalar_type(), at::kBFloat16);  // the matmuls ran in bf16
  EXPECT_EQ(loss.scalar_type(), at::kFloat);       // the loss is reduced in fp32
  EXPECT_NEAR(loss.item<double>(), fp32, 0.02 * fp32);
  for (const auto& p : gpt->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().scalar_type(), at::kFloat);  // fp32 master weights
    EXPECT_TRUE(p.grad().isfinite().all().item<bool>());
  }
}

}  // namespace
}  // namespace mb::model
