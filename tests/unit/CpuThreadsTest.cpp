// The CPU thread choice (Note [CPU threads on a busy machine]): cgroup quotas read from fake
// v1 and v2 trees, the count from affinity, quota, ranks, SLURM and other processes' load, and
// the busy-CPU warning's rule. The real system is exercised by tests/cli/test_cpu_threads.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "dist/CpuThreads.h"

namespace mb::dist {
namespace {

namespace fs = std::filesystem;

class CpuThreadsCgroups : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("mb-cgroups-" + std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  void write(const std::string& path, const std::string& text) {
    fs::create_directories((root_ / path.substr(1)).parent_path());
    std::ofstream(root_ / path.substr(1)) << text;
  }
  std::optional<double> quota(const std::string& selfCgroup, const std::string& mountInfo) {
    where_.clear();
    return cgroupCpuQuota(selfCgroup, mountInfo, root_.string(), where_);
  }

  fs::path root_;
  std::string where_;
};

const char* kV2Mount = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
const char* kV1Mount =
    "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";

TEST_F(CpuThreadsCgroups, V2TakesTheSmallestQuotaOnThePathToTheRoot) {
  write("/sys/fs/cgroup/job/cpu.max", "max 100000\n");
  write("/sys/fs/cgroup/job/step/cpu.max", "300000 100000\n");
  EXPECT_EQ(quota("0::/job/step\n", kV2Mount), 3.0);
  EXPECT_NE(where_.find("job/step/cpu.max"), std::string::npos) << where_;
  write("/sys/fs/cgroup/job/cpu.max", "150000 100000\n");  // a parent's limit binds the child
  EXPECT_EQ(quota("0::/job/step\n", kV2Mount), 1.5);
  EXPECT_NE(where_.find("job/cpu.max"), std::string::npos) << where_;
}

TEST_F(CpuThreadsCgroups, V2WithoutALimitHasNoQuota) {
  write("/sys/fs/cgroup/job/cpu.max", "max 100000\n");
  EXPECT_FALSE(quota("0::/job\n", kV2Mount));
  EXPECT_FALSE(quota("0::/job\n", ""));  // no cgroup2 mount at all
}

TEST_F(CpuThreadsCgroups, V1ReadsCfsQuotaOverPeriod) {
  write("/sys/fs/cgroup/cpu,cpuacct/slurm/job_7/cpu.cfs_quota_us", "200000\n");
  write("/sys/fs/cgroup/cpu,cpuacct/slurm/job_7/cpu.cfs_period_us", "100000\n");
  write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  const std::string self = "5:memory:/slurm/job_7\n4:cpu,cpuacct:/slurm/job_7\n";
  EXPECT_EQ(quota(self, kV1Mount), 2.0);
  write("/sys/fs/cgroup/cpu,cpuacct/slurm/job_7/cpu.cfs_quota_us", "-1\n");
  EXPECT_FALSE(quota(self, kV1Mount));
}

TEST_F(CpuThreadsCgroups, AContainerSeesItsOwnCgroupAtTheMountPoint) {
  // Docker with cgroup v1 shows the host's path in /proc/self/cgroup but mounts its own cgroup.
  write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "400000\n");
  write("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(quota("4:cpu,cpuacct:/docker/0123abcd\n", kV1Mount), 4.0);
}

CpuBudget machine(int online, int affinity) {
  CpuBudget budget;
  budget.online = online;
  budget.affinity = affinity;
  return budget;
}

TEST(CpuThreadsChoice, TrainThreadsThenOmpNumThreadsWin) {
  CpuBudget budget = machine(8, 8);
  budget.ompNumThreads = "3";
  EXPECT_EQ(chooseThreads(5, 1, budget).threads, 5);
  EXPECT_EQ(chooseThreads(5, 1, budget).why, "train.threads");
  EXPECT_EQ(chooseThreads(0, 1, budget).threads, 3);
  EXPECT_NE(chooseThreads(0, 1, budget).why.find("OMP_NUM_THREADS=3"), std::string::npos);
}

TEST(CpuThreadsChoice, ACgroupQuotaCapsTheMachinesCpus) {
  CpuBudget budget = machine(64, 64);
  budget.quota = 2.0;
  budget.quotaFile = "/sys/fs/cgroup/cpu.max";
  const ThreadChoice choice = chooseThreads(0, 1, budget);
  EXPECT_EQ(choice.threads, 2);
  EXPECT_NE(choice.why.find("a cgroup CPU quota of 2 (/sys/fs/cgroup/cpu.max)"), std::string::npos)
      << choice.why;
  budget.quota = 1.5;  // rounded up, as Go and Java do
  EXPECT_EQ(chooseThreads(0, 1, budget).threads, 2);
  budget.quota = 0.2;
  EXPECT_EQ(chooseThreads(0, 1, budget).threads, 1);
  budget.quota = 8.0;  // shared by the ranks of the node
  EXPECT_EQ(chooseThreads(0, 4, budget).threads, 2);
}

TEST(CpuThreadsChoice, ABoundRankKeepsItsCpusAndSlurmCaps) {
  EXPECT_EQ(chooseThreads(0, 8, machine(64, 4)).threads, 4);  // mpirun --bind-to: its share
  EXPECT_EQ(chooseThreads(0, 8, machine(64, 64)).threads, 8);
  CpuBudget slurm = machine(64, 64);
  slurm.slurmCpusPerTask = 4;
  const ThreadChoice choice = chooseThreads(0, 1, slurm);
  EXPECT_EQ(choice.threads, 4);
  EXPECT_NE(choice.why.find("SLURM_CPUS_PER_TASK=4"), std::string::npos) << choice.why;
}

TEST(CpuThreadsChoice, CoresOtherProcessesKeepBusyAreLeftToThem) {
  CpuBudget busy = machine(2, 2);
  busy.othersRunnable = 2;
  const ThreadChoice choice = chooseThreads(0, 1, busy);
  EXPECT_EQ(choice.threads, 1);
  EXPECT_NE(choice.why.find("less 2 that other processes keep busy"), std::string::npos)
      << choice.why;
  busy.othersRunnable = 1;
  EXPECT_EQ(chooseThreads(0, 1, busy).threads, 1);
  busy.othersRunnable = 0;
  EXPECT_EQ(chooseThreads(0, 1, busy).threads, 2);
  // Work on the 60 CPUs outside a 4-CPU quota leaves the 4 alone; more than that does not.
  CpuBudget big = machine(64, 64);
  big.quota = 4.0;
  big.othersRunnable = 60;
  EXPECT_EQ(chooseThreads(0, 1, big).threads, 4);
  big.othersRunnable = 62;
  EXPECT_EQ(chooseThreads(0, 1, big).threads, 2);
  big.othersRunnable = 500;
  EXPECT_EQ(chooseThreads(0, 1, big).threads, 1);
}

TEST(CpuThreadsContention, WarnsOnceWhenStepsJumpWhileOthersWantTheCores) {
  CpuContentionWatch watch(2);
  EXPECT_EQ(watch.window(0.500, 9), "");  // the first window is warm-up, never judged
  for (int i = 0; i < CpuContentionWatch::kWarmupWindows; ++i)
    EXPECT_EQ(watch.window(0.010, 9), "");
  EXPECT_EQ(watch.window(0.029, 9), "") << "under 3x the median";
  const std::string warning = watch.window(0.045, 9);
  EXPECT_NE(warning.find("4.5x longer than this run's median (45.0 ms against 10.0 ms)"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("9 threads are runnable"), std::string::npos) << warning;
  EXPECT_NE(warning.find("train.threads=1"), std::string::npos) << warning;
  EXPECT_EQ(watch.window(0.045, 9), "") << "said once per run";
}

TEST(CpuThreadsContention, ASlowWindowWithIdleCoresIsNotContention) {
  CpuContentionWatch watch(2);
  for (int i = 0; i < 5; ++i)
    watch.window(0.010, 1);
  EXPECT_EQ(watch.window(0.100, 2), "") << "2 runnable on 2 cores: nothing waits";
  EXPECT_EQ(watch.window(0.100, -1), "") << "unknown run queue";
}

}  // namespace
}  // namespace mb::dist
