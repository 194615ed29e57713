#pragma once
// The training loop (read Trainer::run() from top to bottom). It ties together the resident
// data (src/data), the model (src/model), the gradient reducer (src/dist), the optimizer,
// checkpoints, metrics, and preemption signals. Its methods live in three files: the step loop
// (Trainer.cpp), the run's start (TrainerStart.cpp), and what runs between steps: logging,
// evaluation, checkpoints (TrainerBetweenSteps.cpp). When each happens is decided by Schedule
// (Note [Training schedule]); the loop asks it.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "config/Config.h"
#include "data/DataInfo.h"
#include "train/Signals.h"
#include "train/checkpoints/Checkpoint.h"
#include "train/watch/LogWindow.h"
#include "train/watch/Progress.h"
#include "train/watch/StepProfiler.h"

namespace mb::data {
class ShardedData;
}
namespace mb::dist {
class Communicator;
class GradientReducer;
class Runtime;
}  // namespace mb::dist
namespace mb::model {
class Model;
}

namespace mb::train {

class CarriedStates;
class CheckpointDirectory;
class RunLock;
struct MemoryPlan;
struct EvalOptions;
class LossScaler;
class MetricsWriter;
class Optimizer;
class StepRedo;
class PaceWatch;
class PhaseClock;
class Schedule;
class StepChecks;
struct WarmStart;

// How a run ended (the process exit code follows from it).
enum class RunOutcome { kFinished, kEarlyStopped, kPreempted, kTooManyBadSteps };

// What run() did, for a walk-forward's report of its folds (Note [Walk-forward]).
struct RunSummary {
  std::int64_t step = 0;      // the step the run reached
  std::int64_t stepsRun = 0;  // the steps this run() took (a resume takes the rest)
  double stepSeconds = 0;     // in training steps
  double evalSeconds = 0;     // in evaluations between steps
  double checkpointSeconds = 0;
  std::string trainSplit, valSplit;  // describeSplit() of the run's train and val splits
};

class Trainer {
 public:
  Trainer(Config config, dist::Runtime& runtime, const ProfileRequest& profile = {});
  ~Trainer();

  RunOutcome run();
  const RunSummary& summary() const { return summary_; }

  // What a scheduled evaluation leads to.
  enum class AfterEval { kGoOn, kStopEarly, kStopRequested };

 private:
  struct StepResult {
    // 1-D double, on the device with host_sync = log (Note [Step checks]), else on the host:
    // [the global gradient norm before clipping], and with fp16 [norm, found_inf, the loss scale
    // the step used] (Note [Loss scaling]). The update was skipped iff the norm is not finite
    // or found_inf is 1.
    at::Tensor check;
    std::int64_t samples = 0;
    at::Tensor loss;  // this rank's share of the step's global mean loss (device, 0-d)
    // Note [Stopping within seconds]: a stop request every rank agreed on in this step (its
    // signal; 0: none). `dropped`: a rank left its micro-batches early, so nothing was applied.
    int stopSignal = 0;
    bool dropped = false;
    bool checkpointDue = false;  // Note [Checkpoints by time] (Schedule.cpp): every rank agrees
  };
  // This rank's micro-batches of a step, as accumulateGradients left them.
  struct MicroBatches {
    bool ranOut = false;     // out of memory, caught for a redo (Note [A step that runs out ...])
    bool leftEarly = false;  // a stop request was seen before every micro-batch ran
    std::int64_t done = 0;
    std::int64_t total = 0;
  };
  // Rolling statistics between two log lines.
  void setUpDevice();
  void warnIfCpuPrecisionIsSlow();  // Note [CPU precision]
  bool autoOnCpu() const;           // train.precision = auto, training on the CPU
  void settlePrecision();           // Note [CPU auto precision]; records the precision in state_
  void lockRunDirectory();
  void prepareRunDirectory();
  std::optional<CheckpointContent> findResumePoint();
  // Note [Warm starts] (WarmStart.cpp): rank 0 reads train.init_from unless the run resumes;
  // applyWarmStart loads it into the model (and optimizer) before restoreFrom.
  void findWarmStart(bool resuming);
  void applyWarmStart();
  void recordWarmStart();  // rank 0: the "init_from" record of metrics.jsonl
  // Note [Data continuity] (DataContinuity.cpp): before step 1 of a resume.
  void checkDataContinuity(const std::optional<CheckpointContent>& resumed);
  void recordDataChange();  // rank 0: the "data_change" record of an accepted change
  void buildModelAndOptimizer();
  void restoreFrom(std::optional<CheckpointContent>& resumed);
  void planMemory(std::int64_t rssAtStart);  // Note [Memory plan]
  void planEvalBatch(MemoryPlan& plan);      // Note [Evaluation batch]

  StepResult trainStep();
  MicroBatches accumulateGradients(double normalizer, const StepRedo& redo, at::Tensor& lossSum);
  void halveMicroBatchAfterOutOfMemory(int rankThatRanOut);
  void dropStep(const MicroBatches& mine, int signal);
  // A step longer than this writes progress lines (its micro-batches done so far).
  static constexpr double kSlowStepSeconds = 60;
  WorkProgress::Options slowStepProgress(std::int64_t step, std::int64_t microSteps) const;
  // Empty when a stop request abandoned it (Note [Stopping within seconds]).
  std::map<std::string, double> evaluate(data::Split split);
  // Note [Baselines]: the first evaluation of each split in this process logs and records them.
  void recordBaselines(data::Split split, std::int64_t samples,
                       const std::map<std::string, double>& baselines);
  void fitEvalBatchToWhatIsHeld(EvalOptions& options) const;           // Note [Evaluation batch]
  bool afterEvaluation(const std::map<std::string, double>& metrics);  // true: stop early
  // The val split, then afterEvaluation (Note [Checkpoint before evaluation]); a stop request
  // abandons it (Note [Stopping within seconds]) and leaves the step's evaluation pending.
  AfterEval evaluateAndRecord();
  void saveCheckpoint(const char* reason);
  // Rank 0 only; `extra` from CarriedStates::gather() (collective).
  CheckpointContent snapshot(NamedTensors extra) const;
  // Adds the step to window_; writes the log line and metrics record when `lineDue`.
  void logStep(const StepResult& step, bool lineDue);
  void logModelStatistics() const;

  // The learning rate of the step about to run (0-based index state_.step: what the optimizer
  // applies next, and what a checkpoint records), and of the step that just finished (what log
  // lines and metrics report).
  double nextStepLr() const;
  double lastStepLr() const;
  bool isRoot() const;
  dist::Communicator& control() const;  // the runtime's control communicator
  // Samples per micro-batch on this rank: train.micro_batch, else its share of the global batch.
  std::int64_t microBatch() const;

  Config config_;
  dist::Runtime& runtime_;
  std::shared_ptr<dist::Communicator> dataComm_;
  c10::Device device_{c10::kCPU};
  DType precision_ = DType::kFp32;  // train.precision as resolved for device_ (choosePrecision)
  std::unique_ptr<data::ShardedData> data_;
  std::shared_ptr<model::Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<dist::GradientReducer> reducer_;
  std::unique_ptr<CarriedStates> carried_;  // what the model carries between steps
  std::unique_ptr<LossScaler> scaler_;      // Note [Loss scaling]; disabled unless fp16
  std::unique_ptr<Schedule> schedule_;      // every "when" (Note [Training schedule])
  std::unique_ptr<RunLock> runLock_;        // rank 0: Note [One writer per run directory]
  std::unique_ptr<CheckpointDirectory> checkpoints_;
  std::unique_ptr<MetricsWriter> metrics_;  // rank 0 only
  std::unique_ptr<ProgressBar> progress_;   // rank 0 on a terminal
  std::unique_ptr<PhaseClock> phases_;      // Note [Step phases]
  std::unique_ptr<StepProfiler> profiler_;  // Note [Operator profile]
  std::unique_ptr<PaceWatch> pace_;         // warnings: starved, slow, growing
  std::unique_ptr<StepChecks> checks_;      // Note [Step checks]
  TrainerState state_;
  LogWindow window_;  // the steps since the last log line (Note [Log windows across a resume])
  // Rank 0: the checkpoint resumed from; the run's origin and the data changes a resume
  // accepted, carried into every checkpoint (Note [Warm starts], Note [Data continuity]).
  std::string resumedFrom_;
  std::string initFromYaml_;
  std::string dataChanges_;
  std::string dataChangePending_;         // for metrics.jsonl once it is open
  std::unique_ptr<WarmStart> warmStart_;  // rank 0, until applied
  bool warmStarting_ = false;
  StopLeadCheck stopLead_;  // Note [Stop lead time]
  // Note [Evaluation batch]: set by the memory plan; 0 without one (the limit is used).
  std::int64_t evalBatch_ = 0;
  std::set<std::string> baselinesRecorded_;  // splits whose baselines were recorded
  std::int64_t evalRoomBytes_ = 0;
  double evalBytesPerSample_ = 0;       // the plan's bound at evalBatch_, per sample
  std::int64_t evalBudgetBytes_ = 0;    // the plan's budget, on the CPU
  std::int64_t stepVariableBytes_ = 0;  // the plan's activations and workspace
  std::int64_t rssAtStart_ = 0;         // before data, model and optimizer
  RunSummary summary_;
  bool saidValIsEmpty_ = false;
};

}  // namespace mb::train
