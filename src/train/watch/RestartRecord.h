#pragma once
// Note [Restart records]
// A launcher that restarts a failed job by itself (launch/train-multinode.sh --max-restarts,
// slurm/job.sh's requeue) tells the new run what happened through its environment:
//   MEGABATCH_RESTART                 K/N: restart K of at most N
//   MEGABATCH_RESTART_REASON          e.g. "host lost", "rank failed", "scale up", "requeued"
//   MEGABATCH_RESTART_RANKS_BEFORE    the ranks of the run that failed
//   MEGABATCH_RESTART_LOST_HOSTS      the hosts that no longer answered, comma-separated
//   MEGABATCH_RESTART_FAILED_STEP     the last step the failed run logged
//   MEGABATCH_RESTART_FAILED_AT       when the failed run ended (Unix seconds)
// Once the first step of the new run has finished, rank 0 writes one `restart` record to
// metrics.jsonl and one line to train.log: the rank counts before and after, the lost hosts,
// the resume step and the steps redone, and the seconds from the failure to that first step.
// Without MEGABATCH_RESTART nothing is written: a resume by hand is not a restart.
#include <cstdint>
#include <optional>
#include <string>

namespace mb::train {

class JsonRecord;

struct RestartInfo {
  std::int64_t restart = 0;      // K of "K/N"
  std::int64_t maxRestarts = 0;  // N (0: not given)
  std::string reason;
  std::int64_t ranksBefore = -1;  // -1: not given
  std::string lostHosts;
  std::int64_t failedStep = -1;
  double failedAt = -1;  // Unix seconds; negative: not given
};

// The launcher's account of the restart this process is (nullopt: not a restart).
std::optional<RestartInfo> restartFromEnvironment();

// Fills `record` (event "restart") and returns the train.log line, once the first step after
// `resumeStep` finished at `now` (Unix seconds) on `ranksAfter` ranks.
std::string describeRestart(const RestartInfo& info, std::int64_t resumeStep, int ranksAfter,
                            double now, JsonRecord& record);

}  // namespace mb::train
