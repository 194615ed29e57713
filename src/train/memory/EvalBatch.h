#pragma once
// Note [Evaluation batch]
// An evaluation is forward passes only, without autograd: it keeps no activations for a
// backward pass. On the CPU a batch larger than the training micro-batch is faster, as each
// forward pass is then a few large matrix products instead of many small ones: bench/
// eval_batch.py (bench/results/eval_batch.json; whole `megabatch eval` processes, one thread)
// measured 1.51x less CPU time on configs/lstm-multitf.yaml's model at 256 than at 8, and 1.55x
// on configs/demo.yaml's at 256 than at 16, with metrics equal to 1.1e-7. But a larger batch is
// not free: GPT-2 small's attention scores at 256 samples of 1024 tokens are 13 GB a layer (and
// its logits, before Note [Chunked logits], were 53 GB). So the batch is measured, as the training
// micro-batch is (Note [Automatic micro-batch]):
//   - the limit is kCpuEvalBatch on the CPU, and the training micro-batch on a GPU (it fits
//     there with a backward pass, and larger gains little on a GPU);
//   - one forward pass without autograd (forward, loss, metrics) of the heaviest items is
//     measured at kTrialSize samples (halved until it fits): seconds even for GPT-2 at 1024
//     tokens, where trying a size of 100 would cost minutes on a CPU;
//   - the batch is then what that peak bounds: peak x size / kTrialSize within the room (the
//     budget less the fixed part: parameters, gradients, optimizer state and resident data
//     stay allocated through an evaluation), with kActivationMargin. Each phase of a forward
//     takes constant + per sample x size with a constant >= 0, so the peak at a larger size is
//     at most the measured one scaled by the size. A line through two small trials is not a
//     bound: their peak can be a fixed-size buffer (a GPT's chunk of logits, Note [Chunked
//     logits]) that says nothing of the attention that grows past it;
//   - the evaluation then grows its batch by the same bound after each full batch, from that
//     batch's own peak (on the CPU the cap's counter, on CUDA the allocator's peak), up to the
//     limit; the trainer's next evaluation starts from where the last one ended. The metrics do
//     not depend on the batch (sums in another order: equal to about 1e-7);
//   - in training every rank starts from the smallest of every rank's, and the budget is at
//     least the training step's plan (a plan past its budget is a warning, not an error);
//   - on the CPU every evaluation batch runs under a cap, the room (CpuAllocationScope). A
//     chosen batch that passes it after all (heavier items than the trial's) is run again at
//     half the size, with a warning, as a GPU's allocator failure is; a batch given by hand
//     (--batch) that passes it ends with the out-of-memory message. Either way not the
//     kernel's OOM killer, which nothing can catch.
// The trainer measures it in its memory plan (train.memory_plan): the plan's line and its
// memory_plan event (eval_batch, eval_bytes) show it. Without a plan (train.memory_plan: false,
// a model that carries state from step to step, no budget known) the batch is the limit.
// `megabatch eval` and `predict` measure it the same way, within --memory-budget-mb or else 90%
// of the host's MemAvailable (of the GPU's memory on CUDA); their --batch is taken as given.
#include <cstdint>
#include <functional>
#include <string>

#include <c10/core/Device.h>

#include "data/Batch.h"
#include "train/memory/MicroBatchSearch.h"
#include "train/precision/Precision.h"

namespace mb::model {
class Model;
}

namespace mb::train {

constexpr std::int64_t kCpuEvalBatch = 256;

// The largest evaluation batch tried: kCpuEvalBatch on the CPU, the micro-batch on a GPU.
std::int64_t evalBatchLimit(std::int64_t trainMicroBatch, const c10::Device& device);

struct EvalBatchChoice {
  std::int64_t batch = 0;   // samples per forward pass
  std::int64_t bytes = -1;  // its measured peak; -1: not measured
  // What one evaluation batch may take beside the fixed part: on the CPU its cap, and on every
  // device what the batch grows within (grownEvalBatch); 0: unknown.
  std::int64_t roomBytes = 0;
  std::string trials;  // "1: 12 MiB (fits), 2: 20 MiB (fits), 256: 1.9 GiB (fits)"
};

// The items of the trial: the heaviest `count` of the split evaluated.
using HeaviestBatch = std::function<data::Batch(std::int64_t count)>;

struct EvalBatchTrial {
  model::Model& model;
  HeaviestBatch heaviest;
  std::int64_t items = 0;  // in the split: no batch is larger
  c10::Device device;
  DType precision = DType::kFp32;
  std::int64_t fixedBytes = 0;
  std::int64_t budget = 0;  // > 0
};

// The batch a forward of `batch` samples that took `peakBytes` bounds within `roomBytes`,
// between `batch` and `limit`: peak x size / batch, an upper bound for any size above `batch`
// while every phase's memory is constant + per sample x size (Note [Evaluation batch]).
std::int64_t grownEvalBatch(std::int64_t batch, std::int64_t peakBytes, std::int64_t roomBytes,
                            std::int64_t limit);

// The evaluation's first batch (Note [Evaluation batch]): at least 1, which may not fit (its cap
// then stops it with the out-of-memory message).
EvalBatchChoice chooseEvalBatch(const EvalBatchTrial& trial, std::int64_t limit);

// What `megabatch eval`, `predict` and `sample` hold: the model's parameters and buffers.
std::int64_t modelBytes(model::Model& model);

// Note [Evaluation batch]: whether a pass held to a room of `roomBytes` hands freed host memory
// back as it goes (ReturnFreedHostMemory, Note [Keeping freed host memory]): only where the heap
// the steps keep is more than the room's margin. Elsewhere every batch would page-fault its
// memory in again (3x the time of a demo prediction) for no memory it needs.
bool returnsFreedHostMemory(std::int64_t roomBytes, const c10::Device& device);

// A command's budget: --memory-budget-mb (budgetMb > 0), else 90% of the device's available
// memory divided among the node's ranks, plus what the process holds already (heldBytes, on
// the host); 0 when unknown. `source` names it for the log.
std::int64_t commandMemoryBudget(double budgetMb, const c10::Device& device, int ranksOnNode,
                                 std::int64_t heldBytes, std::string& source);

// The batch of `megabatch eval` and `predict`: `givenBatch` (> 0, --batch) as given, else the
// largest up to `limit` that fits their budget, with the trial's `fixedBytes` what they hold.
// Either way, on the CPU, under the cap of that budget. `line` says what was chosen and why.
struct CommandBatch {
  std::int64_t batch = 0;
  std::int64_t roomBytes = 0;
  std::string line;
};
CommandBatch commandEvalBatch(EvalBatchTrial trial, std::int64_t limit, std::int64_t givenBatch,
                              double budgetMb, int ranksOnNode);

}  // namespace mb::train
