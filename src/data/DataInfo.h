#pragma once
// What the trainer and the model factory need to know about a data file. The same on every
// rank (every rank derives it from the file's metadata and the config).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "config/Config.h"

namespace mb::data {

enum class Split { kTrain = 0, kVal = 1, kTest = 2 };
const char* toString(Split split);

// Samples [begin, end) in the file's sample numbering.
struct SampleRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
};

// The times of a range's first and last samples, in the file's unit (data.time_unit).
struct TimeSpan {
  std::int64_t first = 0;
  std::int64_t last = 0;
  bool known = false;  // false: the file has no timestamps, or the range is empty
};

struct InputSpec {
  std::string name;           // "features", a stream name ("m5"), or "tokens"
  std::int64_t window = 0;    // rows per sample (0 for [N, F] samples; context for tokens)
  std::int64_t features = 0;  // F (0 for tokens)
};

struct DataInfo {
  std::string layout;  // data.layout
  std::string path;
  std::int64_t numSamples = 0;          // N over all splits
  std::array<SampleRange, 3> splits{};  // indexed by Split, after the embargo gaps
  std::vector<InputSpec> inputs;
  std::vector<std::int64_t>
      targetShape;                   // per sample: {} for [N], {K} for [N, K], {context} for tokens
  bool integerTargets = false;       // classification labels or tokens
  std::int64_t numClasses = 0;       // classification: max label + 1
  std::int64_t vocabSize = 0;        // tokens
  bool countsTokens = false;         // token inputs: throughput is also reported in tokens/s
  std::int64_t canonicalShards = 0;  // V
  bool hasTimestamps = false;
  // With timestamps: each split's first and last time, and what the timestamps count.
  std::array<TimeSpan, 3> splitTimes{};
  TimeUnit timeUnit = TimeUnit::kSeconds;
  bool splitsByTime = false;      // data.split.train_until (Note [Splits by time])
  std::int64_t horizon = 0;       // data.horizon: samples a target looks ahead; 0 = unknown
  std::string targetsDataset;     // where the file keeps the targets (row i: sample i's)
  std::string timestampsDataset;  // and the samples' times (empty: the file has none)
  std::string fingerprint;        // identifies the file's content for checkpoints
  // Note [Data continuity]: the content, split by split and dataset by dataset, as YAML.
  std::string identityYaml;
  // Note [Selected period]: the test split is a period --from/--to selected, and the train
  // split a stand-in of a few samples that nothing trains on.
  bool periodSelected = false;
  // classification: [classes] labels of each class in the train split (all ranks together);
  // empty when the train split is streamed or a stand-in (periodSelected). For class weights
  // (model.class_weights).
  std::vector<std::int64_t> trainClassCounts;
  // regression: the mean target of the train split (all ranks together), one per target term
  // (panel: over present instruments); empty when the train split is streamed or a stand-in
  // (periodSelected). The mean baseline of evaluation (Note [Baselines]), recorded in every
  // checkpoint (Note [The train mean of an evaluation] in train/judge/Forecasts.h).
  std::vector<double> trainTargetMean;
  // A per-sample dataset that names the samples ([N] or [N, L] NUL-padded text, e.g. graph
  // ids), copied next to the predictions by `megabatch predict`; empty if none.
  std::string sampleIdDataset;

  const SampleRange& split(Split s) const { return splits[static_cast<int>(s)]; }
};

// "[480, 79803): 79323 samples, 2020-01-01T08:01:00Z to 2020-02-25T10:00:00Z" (the times where
// they are known).
std::string describeRange(const SampleRange& range, const TimeSpan& times, TimeUnit unit);
// describeRange of a split of `info`.
std::string describeSplit(const DataInfo& info, Split split);

// The part of DataInfo a model's shape depends on (layout, inputs, targets, classes, vocab), as
// YAML text. Checkpoints carry it so `megabatch sample` can rebuild a model without the data.
std::string modelSpecToYaml(const DataInfo& info);
// Restores those fields (the others stay default). Throws CheckpointError on malformed text.
DataInfo modelSpecFromYaml(const std::string& text);

}  // namespace mb::data
