#pragma once
// Note [Automatic micro-batch]
// train.micro_batch: auto picks, on every rank, the largest micro-batch whose trial step fits the
// memory budget (Note [Memory plan]), and train.global_batch stays what it was: gradient
// accumulation makes up the rest, so an auto run trains on exactly the batches of a run with the
// chosen micro-batch set by hand (the global order depends only on V, the seed and the global
// batch).
//   - A micro-batch fits when the fixed part (parameters, gradients, optimizer state, data) plus
//     the trial's activations and workspace, with kActivationMargin on the latter, is within the
//     budget. The margin is for what one trial does not see: allocator fragmentation, a heavier
//     batch later.
//   - The search starts at the largest micro-batch a rank can get (its share of the global
//     batch: no accumulation). When that does not fit, it estimates the size that would from
//     the activations per sample, and narrows between the largest size that fitted and the
//     smallest that did not, in at most kMaxTrials trials. A trial that runs out of memory for
//     real is a size that does not fit, and so is one that passes the budget: on the CPU the
//     trial's allocations are capped at the budget, so a size that does not fit is stopped
//     there and never takes the memory it would (a cgroup's limit kills, it does not throw).
//     Without a measure the next size is the middle of the two bounds.
//   - The size kept is then balanced: the fewest micro-batches that fit, of equal size (a share
//     of 128 that fits 100 runs as 2 x 64, not 100 + 28: the same steps, less memory).
//   - Each rank searches on its own data, without a collective; one all-reduce (min) then gives
//     every rank the same micro-batch.
// A model that carries state from step to step cannot take a trial step without moving its
// state: auto is refused for it (exit 2), as is a run with the memory plan's budget unknown.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mb::train {

constexpr double kActivationMargin = 0.1;
constexpr int kMaxTrials = 8;

// What one trial measured.
struct TrialOutcome {
  std::int64_t variableBytes = -1;  // activations + workspace; -1: not known (below)
  bool ranOut = false;              // an allocation failed for real
  bool overCap = false;             // stopped when it passed the budget (on the CPU)
};

// One trial of the search.
struct MicroBatchTrial {
  std::int64_t microBatch = 0;
  TrialOutcome outcome;
  bool fits = false;
};

struct MicroBatchChoice {
  std::int64_t microBatch = 0;  // 0: not even one sample fits
  std::vector<MicroBatchTrial> trials;
  std::string describeTrials() const;  // "128: 3.1 GiB (does not fit), 40: 1.0 GiB (fits)"
};

// Measures one trial of a micro-batch of the given size.
using MeasureMicroBatch = std::function<TrialOutcome(std::int64_t microBatch)>;

// The largest micro-batch in [1, largest] for which fixedBytes + (1 + kActivationMargin) x
// measure(size) <= budget, balanced over the share `largest` (Note [Automatic micro-batch]).
MicroBatchChoice searchMicroBatch(std::int64_t largest, std::int64_t fixedBytes,
                                  std::int64_t budget, const MeasureMicroBatch& measure);

// The equal size of the fewest micro-batches of at most `fits` samples that make up `share`.
std::int64_t balancedMicroBatch(std::int64_t share, std::int64_t fits);

}  // namespace mb::train
