// megabatch predict --checkpoint CKPT --data FILE --out FILE.h5 [--split all|train|val|test]
// The work is train::predictToFile (src/train/Prediction.cpp), which the walk's folds share.
#include "app/Cli.h"
#include "common/Error.h"
#include "dist/Runtime.h"
#include "train/Prediction.h"

namespace mb::app {

int runPredict(const ParsedArgs& args, dist::Runtime& runtime) {
  if (!args.has("checkpoint") || !args.has("data") || !args.has("out"))
    throw ConfigError("megabatch predict needs --checkpoint CKPT --data FILE --out FILE.h5");
  train::PredictRequest request;
  request.checkpoint = args.get("checkpoint");
  request.data = args.get("data");
  request.out = args.get("out");
  const bool period = args.has("from") || args.has("to");
  request.split = args.get("split", period ? "" : "all");
  if (period) request.period = {args.get("from", ""), args.get("to", ""), request.split};
  request.batch = args.getInt("batch", 0);
  request.memoryBudgetMb = args.getDouble("memory-budget-mb", 0);
  request.precision = args.get("precision");
  request.overrides = args.positionals;
  if (runtime.rank() != 0) return 0;  // prediction runs in one process; other ranks are idle
  train::predictToFile(request, runtime);
  return 0;
}

}  // namespace mb::app
