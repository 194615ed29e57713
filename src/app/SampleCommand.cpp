// megabatch sample --checkpoint CKPT --prompt TEXT [--max-new-tokens N] [--temperature T]
//                  [--top-k K] [--seed S] [--stop TEXT] [--no-kv-cache]
// Generates from a gpt checkpoint with a KV cache. Needs no data file: the checkpoint
// describes the model.
#include <cstdio>

#include "app/Cli.h"
#include "common/Error.h"
#include "dist/Runtime.h"
#include "model/Generate.h"
#include "model/Model.h"
#include "model/ModelRegistry.h"
#include "train/CheckpointModel.h"

namespace mb::app {

int runSample(const ParsedArgs& args, dist::Runtime& runtime) {
  if (!args.has("checkpoint") || !args.has("prompt"))
    throw ConfigError("megabatch sample needs --checkpoint CKPT and --prompt TEXT",
                      "e.g. megabatch sample --checkpoint runs/arith --prompt \"12+34=\"");
  if (runtime.rank() != 0) return 0;  // generation is a single-process job
  train::TrainedModel run = train::loadTrainedModel(args.get("checkpoint"), {});
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
  model::Generation generation = model::generateText(*run.model, args.get("prompt"), options);
  std::printf("%s%s", args.get("prompt").c_str(), generation.text.c_str());
  if (generation.text.empty() || generation.text.back() != '\n') std::printf("\n");
  return 0;
}

}  // namespace mb::app
