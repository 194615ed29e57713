// Note [One writer per run directory]: the lock's record, the file systems whose locks stay on
// one node, and both kinds of lock against a holder that is alive, ending, gone or stale.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/Error.h"
#include "train/CheckpointModel.h"
#include "train/checkpoints/RunLock.h"

namespace mb::train {
namespace {
namespace fs = std::filesystem;

class RunLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("megabatch-runlock-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  RunLockOptions options(const std::string& mode, double wait = 0) const {
    return {dir_.string(), mode, wait, {}};
  }
  std::string lockPath() const { return (dir_ / "run.lock").string(); }

  // A lock file left by someone else, its heartbeat `ageSeconds` old.
  void plantLockFile(const LockOwner& owner, double ageSeconds) const {
    fs::create_directories(dir_);
    std::ofstream(lockPath()) << formatLockOwner(owner);
    const auto when =
        fs::file_time_type::clock::now() - std::chrono::duration_cast<fs::file_time_type::duration>(
                                               std::chrono::duration<double>(ageSeconds));
    fs::last_write_time(lockPath(), when);
  }

  static LockOwner someone(const std::string& host, long pid, const std::string& state) {
    return {host, pid, 1796198400, "megabatch train --config a.yaml", state, "file", "feedbeef"};
  }

  // The refusal's message, or "" when acquire() succeeded.
  std::string refusal(const RunLockOptions& opts) const {
    try {
      RunLock::acquire(opts);
    } catch (const ConfigError& error) {
      return error.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(RunLockTest, RecordRoundTripsAndATornOneIsNotRead) {
  const LockOwner owner = someone("node7", 4242, "stopping");
  const std::string text = formatLockOwner(owner);
  const auto read = parseLockOwner(text);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->host, "node7");
  EXPECT_EQ(read->pid, 4242);
  EXPECT_EQ(read->startedUnix, 1796198400);
  EXPECT_EQ(read->command, owner.command);
  EXPECT_TRUE(read->ending());
  EXPECT_FALSE(parseLockOwner(text.substr(0, text.find("token:"))).has_value());
  EXPECT_FALSE(parseLockOwner("").has_value());
  EXPECT_NE(read->describe(1796198460)
                .find("pid 4242 on host node7, started 2026-12-02 08:00:00 "
                      "UTC (60 s ago), stopping"),
            std::string::npos)
      << read->describe(1796198460);
}

TEST(RunLockFileSystems, NodeLocalLocksAreRecognised) {
  EXPECT_EQ(whyLocksAreNodeLocal("ext4", "rw,relatime"), "");
  EXPECT_EQ(whyLocksAreNodeLocal("gpfs", "rw"), "");
  EXPECT_EQ(whyLocksAreNodeLocal("nfs4", "rw,vers=4.2,local_lock=none"), "");
  EXPECT_EQ(whyLocksAreNodeLocal("lustre", "rw,flock,lazystatfs"), "");
  EXPECT_NE(whyLocksAreNodeLocal("lustre", "rw,localflock").find("localflock"), std::string::npos);
  EXPECT_NE(whyLocksAreNodeLocal("lustre", "rw,lazystatfs").find("without the flock"),
            std::string::npos);
  EXPECT_NE(whyLocksAreNodeLocal("nfs", "rw,vers=3,nolock").find("nolock"), std::string::npos);
  EXPECT_NE(whyLocksAreNodeLocal("nfs4", "rw,local_lock=posix").find("local_lock"),
            std::string::npos);
  EXPECT_NE(whyLocksAreNodeLocal("fuse.gcsfuse", "rw").find("FUSE"), std::string::npos);
  EXPECT_NE(whyLocksAreNodeLocal("beegfs", "rw").find("BeeGFS"), std::string::npos);
  // /tmp is on a local disk or tmpfs here: kernel locks.
  EXPECT_EQ(whyLocksAreNodeLocalAt(fs::temp_directory_path().string()), "");
}

TEST_F(RunLockTest, KernelLockRefusesASecondHolderAndIsFreeOnceReleased) {
  {
    auto first = RunLock::acquire(options("kernel"));
    EXPECT_TRUE(first->kernelLock());
    const std::string message = refusal(options("kernel"));
    EXPECT_NE(
        message.find("is in use: another trainer holds it: pid " + std::to_string(::getpid())),
        std::string::npos)
        << message;
    EXPECT_NE(message.find("kill -USR1"), std::string::npos) << message;
  }
  // Released: the file stays (it is never deleted in this mode) and says the holder ended.
  const auto left = parseLockOwner([&] {
    std::ifstream in(lockPath());
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }());
  ASSERT_TRUE(left.has_value());
  EXPECT_EQ(left->state, "ended");
  EXPECT_EQ(refusal(options("kernel")), "");
}

TEST_F(RunLockTest, KernelLockWaitsForAHolderThatIsEnding) {
  auto first = RunLock::acquire(options("kernel"));
  first->markFinishing();
  const auto start = std::chrono::steady_clock::now();
  const std::string message = refusal(options("kernel", 0.6));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(message.find("finishing"), std::string::npos) << message;
  EXPECT_NE(message.find("still held after waiting"), std::string::npos) << message;
  EXPECT_GE(waited, 0.5);
  EXPECT_LT(waited, 3.0);
}

TEST_F(RunLockTest, LockFileRefusesALiveHolderAndRemovesItselfAtTheEnd) {
  {
    auto first = RunLock::acquire(options("file"));
    EXPECT_FALSE(first->kernelLock());
    EXPECT_NE(refusal(options("file")).find("is in use"), std::string::npos);
    // A kernel-lock trainer must not take over a live lock-file holder either.
    EXPECT_NE(refusal(options("kernel")).find("is in use"), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(lockPath()));
}

TEST_F(RunLockTest, LockFileOfAHolderGoneFromThisHostIsTakenAtOnce) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  // A pid above the kernel's limit (pid_max is at most 2^22) belongs to no process.
  plantLockFile(someone(host, 1L << 23, "training"), 1);
  EXPECT_EQ(refusal(options("file")), "");
}

TEST_F(RunLockTest, LockFileOfAnotherHostIsStaleOnlyWhenItsHeartbeatStops) {
  plantLockFile(someone("some-other-host", 99, "training"), 5);
  EXPECT_NE(refusal(options("file")).find("pid 99 on host some-other-host"), std::string::npos);
  plantLockFile(someone("some-other-host", 99, "training"), RunLock::kStaleSeconds + 30);
  EXPECT_EQ(refusal(options("file")), "");
}

TEST_F(RunLockTest, LockFileWaitIsBoundedForAnEndingHolder) {
  plantLockFile(someone("some-other-host", 99, "stopping"), 1);
  const std::string message = refusal(options("file", 0.5));
  EXPECT_NE(message.find("stopping"), std::string::npos) << message;
  EXPECT_NE(message.find("still held after waiting"), std::string::npos) << message;
}

// Readers take no lock: when run.keep_last removed the file `latest` named before the reader was
// done with it, the reader follows `latest` again; a file named directly is not second-guessed.
TEST_F(RunLockTest, ReaderFollowsLatestAgainWhenItsFileWasRemoved) {
  const fs::path checkpoints = dir_ / "checkpoints";
  fs::create_directories(checkpoints);
  std::ofstream(checkpoints / "step-00000001.h5") << "one";
  std::ofstream(checkpoints / "latest") << "step-00000001.h5\n";
  std::vector<std::string> read;
  readNewestCheckpoint(dir_.string(), [&](const std::string& path) {
    read.push_back(fs::path(path).filename().string());
    if (read.size() > 1) return;
    // The trainer writes step 2, points `latest` at it and prunes step 1 under the reader.
    std::ofstream(checkpoints / "step-00000002.h5") << "two";
    std::ofstream(checkpoints / "latest") << "step-00000002.h5\n";
    fs::remove(checkpoints / "step-00000001.h5");
    throw CheckpointError("cannot open " + path);
  });
  EXPECT_EQ(read, (std::vector<std::string>{"step-00000001.h5", "step-00000002.h5"}));

  const std::string named = (checkpoints / "step-00000002.h5").string();
  int calls = 0;
  EXPECT_THROW(readNewestCheckpoint(named,
                                    [&](const std::string&) {
                                      ++calls;
                                      throw CheckpointError("damaged");
                                    }),
               CheckpointError);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace mb::train
