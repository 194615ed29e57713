#include "dist/CpuThreads.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace mb::dist {

namespace {

// The variables megabatch adds. Note [CPU threads on a busy machine]: bench/models/busy_cpu.py
// measured the spin count; KMP_BLOCKTIME (milliseconds) is Intel's runtime's short wait.
char spinVariable[] = "GOMP_SPINCOUNT=10000";
char blockTimeVariable[] = "KMP_BLOCKTIME=1";
char markerVariable[] = "MEGABATCH_OMP_WAIT=chosen";
constexpr const char* kMarker = "MEGABATCH_OMP_WAIT";
constexpr const char* kUserVariables[] = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"};
constexpr std::size_t kMaxEnvironment = 8192;

// "NAME=value" in `envp` -> value, or null. Plain C: runs before libc's environment exists.
const char* findVariable(char** envp, const char* name) {
  const std::size_t length = std::strlen(name);
  for (char** entry = envp; entry != nullptr && *entry != nullptr; ++entry)
    if (std::strncmp(*entry, name, length) == 0 && (*entry)[length] == '=')
      return *entry + length + 1;
  return nullptr;
}

// Why the last re-execution failed (errno), for the start line; 0 when it was not tried.
// Plain ints: set in the .preinit_array, before any dynamic initialiser could reset them.
int reexecError = 0;
int underValgrind = 0;
const char* notNeeded = nullptr;  // why no wait policy was set: one thread cannot spin at others

// The commands whose threads do the work; every other command starts once, at no extra cost.
bool computes(const char* command) {
  for (const char* name : {"train", "walk", "eval", "predict", "sample"})
    if (command != nullptr && std::strcmp(command, name) == 0) return true;
  return false;
}

}  // namespace

void chooseOpenMpWaitPolicy(int argc, char** argv, char** envp) {
  if (envp == nullptr || argv == nullptr || findVariable(envp, kMarker) != nullptr) return;
  for (const char* name : kUserVariables)
    if (findVariable(envp, name) != nullptr) return;  // the user's choice wins
  if (argc < 2 || !computes(argv[1])) return;
  // Re-executing costs about 0.3 s (LibTorch's libraries are mapped and relocated twice), so it
  // is skipped where the team has one thread. More threads than CPUs make libgomp spin briefly
  // by itself.
  const char* ompThreads = findVariable(envp, "OMP_NUM_THREADS");
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (ompThreads != nullptr && std::strcmp(ompThreads, "1") == 0) {
    notNeeded = "OMP_NUM_THREADS=1";
    return;
  }
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) <= 1) {
    notNeeded = "one CPU in the affinity mask";
    return;
  }
  // Under valgrind /proc/self/exe is valgrind itself; its preload library gives it away.
  const char* preload = findVariable(envp, "LD_PRELOAD");
  if (preload != nullptr && std::strstr(preload, "vgpreload") != nullptr) {
    underValgrind = 1;
    return;
  }
  // Started through the dynamic loader (`ld.so ./megabatch ...`), /proc/self/exe is the loader,
  // which would take argv[1] for the program.
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    reexecError = errno;  // no /proc: say so at start
    return;
  }
  self[length] = '\0';
  if (std::strstr(self, "/ld-linux") != nullptr || std::strstr(self, "/ld.so") != nullptr) return;
  static char* environment[kMaxEnvironment];
  std::size_t count = 0;
  while (envp[count] != nullptr) {
    if (count + 4 >= kMaxEnvironment) return;  // an environment this large keeps the default
    environment[count] = envp[count];
    ++count;
  }
  environment[count++] = spinVariable;
  environment[count++] = blockTimeVariable;
  environment[count++] = markerVariable;
  environment[count] = nullptr;
  execve("/proc/self/exe", argv, environment);
  reexecError = errno;  // still here: run on with the runtime's default and say why
}

const std::string& takeOpenMpWaitChoice() {
  static const std::string choice = [] {
    const char* marker = std::getenv(kMarker);
    if (marker != nullptr && std::strcmp(marker, "chosen") == 0) {
      for (const char* name : {kMarker, "GOMP_SPINCOUNT", "KMP_BLOCKTIME"})
        unsetenv(name);
      return fmt::format(
          "a short spin ({}, {}: they give a busy core back; OMP_WAIT_POLICY or "
          "GOMP_SPINCOUNT set yours)",
          spinVariable, blockTimeVariable);
    }
    std::string yours;
    for (const char* name : kUserVariables)
      if (const char* value = std::getenv(name))
        yours += fmt::format("{}{}={}", yours.empty() ? "" : ", ", name, value);
    if (!yours.empty()) return "yours: " + yours;
    if (notNeeded != nullptr)
      return fmt::format(
          "the OpenMP runtime's default (megabatch sets a short spin only when it "
          "expects more than one thread, and started with {})",
          notNeeded);
    if (reexecError != 0)
      return fmt::format(
          "the OpenMP runtime's default (re-executing /proc/self/exe with a short spin failed: "
          "{}); set {} yourself on a machine shared with other work",
          std::strerror(reexecError), spinVariable);
    return std::string(
        underValgrind != 0
            ? "the OpenMP runtime's default (megabatch runs under valgrind)"
            : "the OpenMP runtime's default (not started as the megabatch executable)");
  }();
  return choice;
}

namespace {

std::string readSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return in ? text.str() : std::string();
}

std::vector<std::string> splitText(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, separator);)
    parts.push_back(part);
  return parts;
}

bool listHas(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

struct CgroupMount {
  std::string root;  // the cgroup path mounted there
  std::string mountPoint;
};

// The mount of cgroup v2 (controller "") or of the v1 hierarchy holding `controller`.
std::optional<CgroupMount> findMount(const std::string& mountInfo, const std::string& controller) {
  for (const std::string& line : splitText(mountInfo, '\n')) {
    const std::size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const std::vector<std::string> before = splitText(line.substr(0, dash), ' ');
    const std::vector<std::string> after = splitText(line.substr(dash + 3), ' ');
    if (before.size() < 5 || after.size() < 3) continue;
    const bool v2 = after[0] == "cgroup2";
    const bool v1 = after[0] == "cgroup" && listHas(splitText(after[2], ','), controller);
    if ((controller.empty() && v2) || (!controller.empty() && v1))
      return CgroupMount{before[3], before[4]};
  }
  return std::nullopt;
}

// The directories from the process's cgroup up to the mount point, deepest first.
std::vector<std::string> cgroupDirectories(const CgroupMount& mount, std::string path,
                                           const std::string& prefix) {
  if (mount.root != "/" && path.rfind(mount.root, 0) == 0) path = path.substr(mount.root.size());
  const std::string top = prefix + mount.mountPoint;
  std::string directory = top + (path == "/" ? "" : path);
  if (access(directory.c_str(), F_OK) != 0) directory = top;  // a namespace hides the host's path
  std::vector<std::string> directories;
  for (;;) {
    directories.push_back(directory);
    if (directory.size() <= top.size()) break;
    directory = directory.substr(0, directory.rfind('/'));
  }
  return directories;
}

// CPUs a v2 directory's cpu.max allows ("max 100000" or "200000 100000").
std::optional<double> quotaV2(const std::string& directory) {
  std::istringstream text(readSmallFile(directory + "/cpu.max"));
  std::string quota;
  double period = 0;
  if (!(text >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  return std::atof(quota.c_str()) / period;
}

std::optional<double> quotaV1(const std::string& directory) {
  const double quota = std::atof(readSmallFile(directory + "/cpu.cfs_quota_us").c_str());
  const double period = std::atof(readSmallFile(directory + "/cpu.cfs_period_us").c_str());
  if (quota <= 0 || period <= 0) return std::nullopt;  // -1: no quota
  return quota / period;
}

}  // namespace

std::optional<double> cgroupCpuQuota(const std::string& selfCgroup, const std::string& mountInfo,
                                     const std::string& prefix, std::string& where) {
  std::optional<double> smallest;
  auto consider = [&](std::optional<double> quota, const std::string& file) {
    if (quota && (!smallest || *quota < *smallest)) {
      smallest = quota;
      where = file;
    }
  };
  for (const std::string& line : splitText(selfCgroup, '\n')) {
    const std::size_t first = line.find(':');
    const std::size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    const bool v2 = line.compare(0, first, "0") == 0 && controllers.empty();
    const bool cpuV1 = listHas(splitText(controllers, ','), "cpu");
    if (!v2 && !cpuV1) continue;
    const std::optional<CgroupMount> mount = findMount(mountInfo, v2 ? "" : "cpu");
    if (!mount) continue;
    for (const std::string& directory : cgroupDirectories(*mount, path, prefix))
      consider(v2 ? quotaV2(directory) : quotaV1(directory),
               directory + (v2 ? "/cpu.max" : "/cpu.cfs_quota_us"));
  }
  return smallest;
}

CpuBudget CpuBudget::read() {
  CpuBudget budget;
  budget.online = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  budget.affinity = budget.online;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) budget.affinity = std::max(1, CPU_COUNT(&set));
  budget.quota = cgroupCpuQuota(readSmallFile("/proc/self/cgroup"),
                                readSmallFile("/proc/self/mountinfo"), "", budget.quotaFile);
  if (const char* slurm = std::getenv("SLURM_CPUS_PER_TASK"))
    budget.slurmCpusPerTask = std::max(0, std::atoi(slurm));
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) budget.ompNumThreads = omp;
  return budget;
}

namespace {

int runningThreadsOfThisProcess() {
  int running = 0;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return 1;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    const std::string stat =
        readSmallFile(std::string("/proc/self/task/") + entry->d_name + "/stat");
    const std::size_t close = stat.rfind(')');  // the name may hold spaces and parentheses
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'R') ++running;
  }
  closedir(tasks);
  return std::max(1, running);
}

}  // namespace

int CpuBudget::sampleOthers(int localRanks) {
  constexpr int kSamples = 7;
  std::vector<int> others;
  for (int i = 0; i < kSamples; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const int runnable = CpuContentionWatch::runnableNow();
    if (runnable < 0) return -1;
    others.push_back(runnable - runningThreadsOfThisProcess() - std::max(0, localRanks - 1));
  }
  std::nth_element(others.begin(), others.begin() + kSamples / 2, others.end());
  return std::max(0, others[kSamples / 2]);
}

ThreadChoice chooseThreads(std::int64_t configured, int localRanks, const CpuBudget& budget) {
  if (configured > 0) return {static_cast<int>(configured), "train.threads"};
  const int omp = std::atoi(budget.ompNumThreads.c_str());  // "4" or "4,2": the outer level
  if (omp > 0) return {omp, "your OMP_NUM_THREADS=" + budget.ompNumThreads};
  localRanks = std::max(1, localRanks);
  const int quota = budget.quota ? std::max(1, static_cast<int>(std::ceil(*budget.quota))) : 0;
  const std::string quotaPart =
      budget.quota ? fmt::format("a cgroup CPU quota of {:g} ({})", *budget.quota, budget.quotaFile)
                   : "no cgroup CPU quota";
  const std::string affinityPart =
      fmt::format("affinity {} of {} CPUs, {}", budget.affinity, budget.online, quotaPart);
  ThreadChoice choice;
  if (budget.affinity < budget.online) {  // a launcher bound this rank to its share already
    const int share = quota > 0 ? std::max(1, quota / localRanks) : budget.affinity;
    choice.threads = std::min(budget.affinity, share);
    choice.why = fmt::format(
        "the CPUs this rank is bound to ({}{})", affinityPart,
        share < budget.affinity ? fmt::format(", {} local ranks", localRanks) : std::string());
  } else {
    const int usable = quota > 0 ? std::min(budget.affinity, quota) : budget.affinity;
    // Other work fills the CPUs outside this share first; the rest of it lands on ours.
    const int busy =
        std::min(usable, std::max(0, budget.othersRunnable - (budget.online - usable)));
    choice.threads = std::max(1, (usable - busy) / localRanks);
    choice.why = fmt::format("{} CPU(s) this process may use ({}) / {} rank(s) on this node",
                             usable, affinityPart, localRanks);
    if (busy > 0 && choice.threads < usable / localRanks)
      choice.why += fmt::format(
          ", less {} that other processes keep busy right now ({} runnable threads; the count "
          "stays for the run: set train.threads to choose)",
          busy, budget.othersRunnable);
  }
  if (budget.slurmCpusPerTask > 0 && budget.slurmCpusPerTask < choice.threads) {
    choice.threads = budget.slurmCpusPerTask;
    choice.why += fmt::format(", capped by SLURM_CPUS_PER_TASK={}", budget.slurmCpusPerTask);
  }
  return choice;
}

std::string CpuContentionWatch::window(double stepSeconds, int runnable) {
  if (!firstSkipped_) {  // the first window warms up caches and allocators
    firstSkipped_ = true;
    return "";
  }
  std::string warning;
  if (!warned_ && static_cast<int>(steps_.size()) >= kWarmupWindows && runnable > coresUsed_) {
    std::vector<double> sorted = steps_;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const double median = sorted[sorted.size() / 2];
    if (median > 0 && stepSeconds > kJump * median) {
      warned_ = true;
      warning = fmt::format(
          "steps take {:.1f}x longer than this run's median ({:.1f} ms against {:.1f} ms) while {} "
          "threads are runnable on this machine and the run uses {} core(s) here: other processes "
          "want these cores. Give the run its cores, or use fewer threads (train.threads=1) or "
          "fewer ranks per node (docs/operations.md, \"CPU threads on a busy machine\")",
          stepSeconds / median, 1e3 * stepSeconds, 1e3 * median, runnable, coresUsed_);
    }
  }
  if (steps_.size() >= kHistory) steps_.erase(steps_.begin(), steps_.begin() + kHistory / 2);
  steps_.push_back(stepSeconds);
  return warning;
}

int CpuContentionWatch::runnableNow() {
  std::istringstream stat(readSmallFile("/proc/stat"));
  for (std::string line; std::getline(stat, line);)
    if (line.rfind("procs_running ", 0) == 0) return std::atoi(line.c_str() + 14);
  return -1;
}

}  // namespace mb::dist
