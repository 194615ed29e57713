#pragma once
// Note [CPU auto precision]
// train.precision = auto on the CPU is bf16 where it pays, as measured on this machine for
// this model, and fp32 otherwise (on a GPU, auto follows the card: Precision.h). It pays when
//  1. the CPU has bf16 units (avx512_bf16 or amx_bf16: Note [CPU precision]); without them
//     nothing is timed and the run is fp32, as before;
//  2. the probe's product at the model's width takes at most kPaysRatio of fp32's time (cheap,
//     0.1 s, and a quick no for small widths);
//  3. a trial step of the model itself (one forward and backward of a micro-batch, as the
//     memory plan's trial step runs it) takes at most kPaysRatio of fp32's time. The probe alone
//     misjudges recurrent models: it said 0.55x for the demo LSTM, which trains 11% slower in
//     bf16 on an avx512_bf16 Xeon (bench/results/cpu-bf16-2026-12-02/).
// The trial grows its batch from 1 item, 4x at a time up to the micro-batch (at most
// kCpuAutoTrialItems), while a pair of steps (fp32 and bf16) stays under
// kLongestTrialPairSeconds, each size warmed up once; then it times pairs until
// kTrialBudgetSeconds have passed since it began (at most five). So a model whose step takes
// seconds on this CPU is timed on a few items (a smaller batch only favours fp32), and the trial
// stays near the budget, except where one step of one item takes longer than the budget
// (lstm-multitf: 1104 sequential LSTM steps a sample, about 1.5 s an item in fp32 on a 2-core
// Xeon): then the warm-up pair is the measurement, and the trial costs one step in each
// precision;
// it leaves the model, its gradients and the RNG as they were (TrialRestorer). Every rank times
// its own trial at once (as they will train), and rank 0's measurement decides for all.
// A model that carries state from step to step (stateful lanes) is not tried: it stays fp32.
// The choice is recorded in the checkpoint (TrainerState), with the CPU it was made on: a
// resume on the same CPU keeps it without measuring again (timings are noisy, and a run should
// not change precision under the user's feet), and a resume on another CPU measures again and
// says what changed.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "config/Config.h"
#include "train/loop/TrainerState.h"
#include "train/precision/CpuPrecision.h"
#include "train/precision/Precision.h"

namespace mb::data {
struct Batch;
}

namespace mb::train {

struct TrialStep;

// bf16 must take at most this fraction of fp32's time (1 / 1.2) for auto to choose it.
constexpr double kPaysRatio = 1 / 1.2;
constexpr double kTrialBudgetSeconds = 1.5;
constexpr double kLongestTrialPairSeconds = 0.5;
// The trial's micro-batch is at most this many items (the growth's time bound stops it sooner for
// costly items). It should be the run's micro-batch: bf16's casts and reorders are a cost per
// step, so a smaller batch favours fp32 (the demo LSTM: 1.18x slower in bf16 at 64 samples a
// step, 1.15x faster at 128).
constexpr std::int64_t kCpuAutoTrialItems = 256;

// TrainerState::trainedPrecision's codes.
std::int64_t precisionCode(DType dtype);
std::optional<DType> precisionFromCode(std::int64_t code);  // nullopt: 0 (not recorded)

// This CPU, for a checkpoint: a hash of /proc/cpuinfo's model name and flags (the flags as
// MEGABATCH_FAULT_CPU_FLAGS fakes them, so a test can play another CPU). Never 0.
std::int64_t cpuIdentity();
std::string cpuModelName();  // "" where /proc/cpuinfo has none

struct CpuTrialTimes {
  double fp32Ms = 0;  // medians of one forward + backward; 0 = not run
  double bf16Ms = 0;
  int repeats = 0;          // timed calls of each, after one warm-up of each
  bool warmUpOnly = false;  // the warm-ups spent the budget: they are the measurement
  double seconds = 0;       // the whole trial, warm-ups included
  std::int64_t items = 0;
  double ratio() const { return fp32Ms > 0 ? bf16Ms / fp32Ms : 0; }
};

// Times the trial step in fp32 and bf16 (trial.precision is not used) on batchOf(n) for n up to
// maxItems, as the Note says.
CpuTrialTimes timeTrialSteps(const TrialStep& trial,
                             const std::function<data::Batch(std::int64_t)>& batchOf,
                             std::int64_t maxItems);

// What auto decides from.
struct CpuAutoEvidence {
  CpuPrecisionCost probe;  // probe.fp32Ms == 0: not run (no units)
  CpuTrialTimes trial;     // trial.fp32Ms == 0: not run
  std::string notTried;    // why the trial did not run, "" when it ran or was not needed
};

// The rule above, on measurements already taken (a pure function: unit-tested).
PrecisionChoice decideCpuAuto(const CpuAutoEvidence& evidence);

// What the trainer supplies: the model's width for the probe, and either a trial (run on this
// rank) or why there is none.
struct CpuAutoInputs {
  std::int64_t width = 0;
  std::function<CpuTrialTimes()> trial;  // empty: none, for the reason in notTried
  std::string notTried;
};

// train.precision = auto on this CPU: the checkpoint's record when it was made on this CPU,
// else measured (decideCpuAuto). Updates the record in `state` (trainedPrecision,
// autoPrecisionCpu, autoPrecisionTrialRatio) and returns the choice with its log line.
PrecisionChoice chooseCpuAuto(TrainerState& state, const CpuAutoInputs& inputs);

// eval, predict and sample on the CPU (Note [Precision of a new run]): bf16 when the checkpoint
// trained in bf16 and bf16 pays here (units, the probe at `width`, and no trial on this CPU that
// said otherwise); nullopt otherwise, with the reason why not in `whyNot`.
std::optional<PrecisionChoice> cpuInferenceInBf16(const TrainerState& trained, Precision configured,
                                                  std::int64_t width, std::string& whyNot);

}  // namespace mb::train
