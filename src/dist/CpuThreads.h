#pragma once
// How many CPU threads a rank uses and how its idle OpenMP threads wait, chosen from what this
// process may really use, and the warning when other processes take those cores mid-run.
//
// Note [CPU threads on a busy machine]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// LibTorch's intra-op threads are an OpenMP team. Between parallel regions libgomp's idle
// threads spin for GOMP_SPINCOUNT iterations (300,000 by default, milliseconds of a core) before
// they sleep. On a machine of its own that saves a wake-up per region; when other processes want
// the same cores, each spinning thread holds a core the thread it waits for cannot get, and a
// step takes up to 85x longer than with one thread (docs/benchmarks.md, "A busy CPU").
//
// The wait policy: libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its library
// initialiser, before main() and with no API to change them later. So the executable's
// .preinit_array (which runs before any shared library's initialiser) calls
// chooseOpenMpWaitPolicy(), which re-executes /proc/self/exe with GOMP_SPINCOUNT and
// KMP_BLOCKTIME (Intel's runtime) set to a short spin. The process keeps its PID, so mpirun,
// SLURM and signals see one process; mapping and relocating LibTorch again costs about 0.3 s.
// So only train, eval, predict and sample re-execute, and not with OMP_NUM_THREADS=1 or one CPU
// in the affinity mask (one thread never waits for another; more threads than CPUs make libgomp
// spin briefly by itself). A user who sets OMP_WAIT_POLICY, GOMP_SPINCOUNT or KMP_BLOCKTIME
// keeps theirs. The short spin keeps the idle machine's speed (docs/benchmarks.md: 1.01-1.02x)
// and gives a busy core back within microseconds. takeOpenMpWaitChoice() then removes
// megabatch's variables from the environment, so programs megabatch starts see the user's own.
//
// The thread count (train.threads: 0): the CPUs this process may run on (its affinity mask),
// capped by the cgroup's CPU quota (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us,
// the smallest along the path to the root, rounded up), divided by the ranks on this node
// unless a launcher already bound each rank to its share, and capped by SLURM_CPUS_PER_TASK.
// Less the cores that other processes keep busy when the run starts: their runnable threads
// beyond the CPUs outside this process's share. A team of threads on cores that other work holds
// is slower than one thread: each parallel region ends at a barrier that waits for the thread
// the scheduler put aside, and the wait policy cannot help that (the demo LSTM under a burner on
// each of 2 cores: 30 ms a step on 1 thread, 136 ms on 2 passive threads, 834 ms on 2 threads
// with a short spin). The count then stays fixed for the run, so its results do not depend on
// when other work came and went; CpuContentionWatch says when it arrives later.
// train.threads > 0 wins, then the user's OMP_NUM_THREADS.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mb::dist {

// For the .preinit_array: see the Note. Async-signal-safe in spirit: it reads `envp` directly
// (libc's environment is not set up yet) and allocates nothing but one static array.
void chooseOpenMpWaitPolicy(int argc, char** argv, char** envp);

// The wait policy this process runs with, in words ("a short spin (GOMP_SPINCOUNT=10000), chosen
// by megabatch", "yours: OMP_WAIT_POLICY=passive"). The first call also removes megabatch's own
// variables from the environment; call it once, early in main, before any thread starts.
const std::string& takeOpenMpWaitChoice();

// The CPU quota of a cgroup, in CPUs, from the text of /proc/self/cgroup and
// /proc/self/mountinfo; the paths in them are read under `prefix` (tests pass a temporary
// directory). Empty when no quota applies; `where` names the file that set it.
std::optional<double> cgroupCpuQuota(const std::string& selfCgroup, const std::string& mountInfo,
                                     const std::string& prefix, std::string& where);

// What this process may use, read from the system.
struct CpuBudget {
  int online = 1;               // CPUs online on the machine
  int affinity = 1;             // CPUs in this process's affinity mask
  std::optional<double> quota;  // cgroup CPU quota, in CPUs
  std::string quotaFile;
  int slurmCpusPerTask = 0;   // SLURM_CPUS_PER_TASK, 0 when unset
  std::string ompNumThreads;  // the user's OMP_NUM_THREADS, "" when unset
  int othersRunnable = 0;     // other processes' runnable threads at start (sampleOthers)

  // Reads everything but othersRunnable.
  static CpuBudget read();
  // Other processes' runnable threads now: the median over a few samples 5 ms apart of the
  // machine's procs_running, less this process's running threads and its `localRanks - 1`
  // sibling ranks. -1 when /proc cannot tell.
  static int sampleOthers(int localRanks);
};

struct ThreadChoice {
  int threads = 1;
  std::string why;  // "2 CPUs this process may use (affinity 2 of 2 CPUs, no cgroup quota)"
};

// The intra-op threads of one rank: `configured` (train.threads) when > 0, else from `budget`
// and the ranks on this node (see the Note).
ThreadChoice chooseThreads(std::int64_t configured, int localRanks, const CpuBudget& budget);

// Notices when other processes take the run's cores: a log window whose step time exceeds
// kJump times the median of the run's earlier windows while more threads are runnable on the
// machine than the run uses (/proc/stat procs_running). Says so once per run.
class CpuContentionWatch {
 public:
  static constexpr double kJump = 3.0;
  static constexpr int kWarmupWindows = 3;       // windows before the median is trusted
  static constexpr std::size_t kHistory = 4096;  // the median is of the recent windows
  explicit CpuContentionWatch(int coresUsed) : coresUsed_(coresUsed) {}

  // The warning for this window, or "" (also after the first warning).
  std::string window(double stepSeconds, int runnable);
  // Runnable threads on the machine now (procs_running), or -1 when unknown.
  static int runnableNow();

 private:
  int coresUsed_;
  bool warned_ = false;
  bool firstSkipped_ = false;
  std::vector<double> steps_;
};

}  // namespace mb::dist
