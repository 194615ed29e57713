#pragma once
// One writer per run directory (Note [One writer per run directory] in RunLock.cpp): rank 0 of a
// trainer holds run.dir/run.lock from before it reads checkpoints/latest until it exits, so a
// second trainer on the same directory is refused before it writes anything.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace mb::train {

// Who holds a run directory, as its run.lock says (one `key: value` per line).
struct LockOwner {
  std::string host;
  long pid = 0;
  std::int64_t startedUnix = 0;
  std::string command;
  std::string state = "training";  // training | stopping | finishing | ended
  std::string kind = "kernel";     // kernel (a file-system lock) | file (the file itself)
  std::string token;               // unique to one holder

  // A holder that is on its way out: a newcomer may wait for it (run.lock_wait_s).
  bool ending() const { return state == "stopping" || state == "finishing"; }
  // "pid 123 on host n1, started 2026-12-02 08:01:02 UTC (40 s ago), training: megabatch ..."
  std::string describe(std::int64_t nowUnix) const;
};

std::string formatLockOwner(const LockOwner& owner);
// nullopt for a file being written (torn) or one that is not a lock file.
std::optional<LockOwner> parseLockOwner(const std::string& text);

// Why file-system locks on a mount with this type and these options are not seen by every host,
// or "" when they are (Lustre without `flock`, NFS with `nolock` or `local_lock`, FUSE).
std::string whyLocksAreNodeLocal(const std::string& fsType, const std::string& options);
// The same for the mount that holds `dir`, from /proc/self/mountinfo ("" when unknown).
std::string whyLocksAreNodeLocalAt(const std::string& dir);

struct RunLockOptions {
  std::string runDir;
  std::string mode = "auto";       // run.lock: auto | file
  double waitSeconds = 60;         // run.lock_wait_s: how long to wait for a holder that is ending
  std::function<bool()> stopping;  // polled every second: true once this trainer is stopping
};

class RunLock {
 public:
  static constexpr double kHeartbeatSeconds = 10;
  // A lock file whose heartbeat (its modification time) is older than this is stale.
  static constexpr double kStaleSeconds = 60;

  // Takes run.dir/run.lock (creating run.dir), waiting up to options.waitSeconds for a holder
  // that is ending. ConfigError (exit 2) naming the holder when it stays held.
  static std::unique_ptr<RunLock> acquire(RunLockOptions options);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // Training is over and the last checkpoint follows: a newcomer may wait for it.
  void markFinishing();
  const std::string& path() const { return path_; }
  bool kernelLock() const { return owner_.kind == "kernel"; }

 private:
  RunLock(RunLockOptions options, std::string path, int fd, LockOwner owner);
  void setState(const std::string& state);
  void beat();
  void keepAlive();

  RunLockOptions options_;
  std::string path_;
  int fd_;
  LockOwner owner_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool closing_ = false;
  std::thread heartbeat_;
};

}  // namespace mb::train
