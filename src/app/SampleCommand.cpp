// megabatch sample --checkpoint CKPT --prompt TEXT [--max-new-tokens N] [--temperature T]
//                  [--top-k K] [--seed S] [--stop TEXT] [--no-kv-cache] [--memory-budget-mb MB]
// megabatch sample --checkpoint CKPT --prompts FILE [...]: one prompt per line of FILE, one line
// of output per prompt (the prompt and its continuation, up to the stop text), with progress
// (Note [Work progress]).
// Generates from a gpt checkpoint with a KV cache. Needs no data file: the checkpoint
// describes the model.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "app/Cli.h"
#include "common/CpuAllocationScope.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/OutOfMemory.h"
#include "common/WorkProgress.h"
#include "dist/Runtime.h"
#include "model/Generate.h"
#include "model/Model.h"
#include "model/ModelRegistry.h"
#include "train/CheckpointModel.h"
#include "train/memory/EvalBatch.h"
#include "train/precision/Precision.h"

namespace mb::app {

int runSample(const ParsedArgs& args, dist::Runtime& runtime) {
  if (!args.has("checkpoint") || args.has("prompt") == args.has("prompts"))
    throw ConfigError(
        "megabatch sample needs --checkpoint CKPT and one of --prompt TEXT or --prompts FILE",
        "e.g. megabatch sample --checkpoint runs/arith --prompt \"12+34=\"");
  std::vector<std::string> prompts;
  if (args.has("prompts")) {
    std::ifstream in(args.get("prompts"));
    if (!in)
      throw ConfigError("--prompts " + args.get("prompts") + ": cannot read",
                        "give a text file with one prompt per line");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);
    if (prompts.empty())
      throw ConfigError("--prompts " + args.get("prompts") + ": the file has no prompts",
                        "give a text file with one prompt per line");
  }
  if (runtime.rank() != 0) return 0;  // generation is a single-process job
  train::TrainedModel run = train::loadTrainedModel(args.get("checkpoint"), {});
  runtime.useCpuThreads(run.config.train.threads, "app");
  if (!model::modelKind(run.config.model.kind).languageModel)
    throw ConfigError(run.path + " holds a " + run.model->kind() +
                      " model; megabatch sample needs a language model (model.kind = gpt)");
  model::SamplingOptions options;
  options.maxNewTokens = args.getInt("max-new-tokens", 32);
  options.temperature = args.getDouble("temperature", 0.0);
  options.topK = args.getInt("top-k", 0);
  options.seed = static_cast<std::uint64_t>(args.getInt("seed", 0));
  options.stopString = args.get("stop", "\n");
  options.useKvCache = !args.has("no-kv-cache");
  if (options.maxNewTokens < 1) throw ConfigError("--max-new-tokens must be >= 1");
  if (options.temperature < 0) throw ConfigError("--temperature must be >= 0 (0 = greedy)");
  if (options.topK < 0) throw ConfigError("--top-k must be >= 0 (0 = all tokens)");
  // Note [Precision of a new run]: sampling runs on the CPU, in bf16 only where the checkpoint
  // trained in bf16 and it pays here, unless asked.
  const train::PrecisionChoice precision = train::inferencePrecision(
      args.get("precision"), run.config.train.precision, run.checkpoint.trainer,
      run.config.model.hidden, c10::Device(c10::kCPU));
  if (precision.dtype != DType::kFp32 || run.config.train.precision != Precision::kFp32)
    log::get("app").info("sample precision: {}", precision.reason);
  train::AutocastScope autocast(c10::DeviceType::CPU, precision.dtype);
  MemoryPhase phase("sampling");  // Note [Out of memory is an expected error]
  // Within the budget, or the out-of-memory message instead of the kernel's OOM killer (Note
  // [Evaluation batch]).
  std::string source;
  const std::int64_t held = train::modelBytes(*run.model);
  const std::int64_t budget = train::commandMemoryBudget(args.getDouble("memory-budget-mb", 0),
                                                         c10::Device(c10::kCPU), 1, held, source);
  std::optional<CpuAllocationScope> cap;
  if (budget > 0) cap.emplace(std::max<std::int64_t>(1, budget - held));
  if (prompts.empty()) {
    model::Generation generation = model::generateText(*run.model, args.get("prompt"), options);
    std::printf("%s%s", args.get("prompt").c_str(), generation.text.c_str());
    if (generation.text.empty() || generation.text.back() != '\n') std::printf("\n");
    return 0;
  }
  WorkProgress::Options shown;
  shown.label = "sample";
  shown.unit = "prompts";
  shown.total = static_cast<std::int64_t>(prompts.size());
  shown.startLine = "sample: " + std::to_string(prompts.size()) + " prompts from " +
                    args.get("prompts") + ", up to " + std::to_string(options.maxNewTokens) +
                    " new tokens each";
  WorkProgress progress(shown);
  for (const std::string& prompt : prompts) {
    model::Generation generation = model::generateText(*run.model, prompt, options);
    std::string text = generation.text;
    while (!text.empty() && text.back() == '\n')
      text.pop_back();
    std::printf("%s%s\n", prompt.c_str(), text.c_str());
    std::fflush(stdout);
    progress.advance(1);
  }
  progress.finish();
  return 0;
}

}  // namespace mb::app
