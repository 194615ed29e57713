#include "train/checkpoints/RunLock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "common/Environment.h"
#include "common/Error.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "dist/Watchdog.h"
#include "train/watch/TrainLog.h"

// Note [One writer per run directory]
// Two trainers on one run.dir would cut each other's metrics.jsonl, remove each other's
// unfinished checkpoint writes and interleave two trajectories in checkpoints/. So rank 0 takes
// run.dir/run.lock before it reads or writes anything there, and holds it until the process ends.
//
// - kernel (the default where it works): an exclusive open-file-description lock (fcntl
//   F_OFD_SETLK) on run.lock. The kernel drops it when the process dies, even after kill -9, so a
//   resume starts at once. NFS v4, GPFS and Lustre mounted with `flock` share these locks between
//   hosts. run.lock is never deleted in this mode: a trainer that deleted it could leave a
//   newcomer locking a file that no longer has the name, beside a third that creates a new one.
// - file: where locks are not shared between hosts (Lustre without `flock` or with
//   `localflock`, NFS with `nolock` or `local_lock`, FUSE, BeeGFS; whyLocksAreNodeLocal) or not
//   given at all (ENOLCK, ENOSYS), the file itself is the lock: created with O_EXCL, removed when
//   the trainer ends. Its modification time is a heartbeat, renewed every kHeartbeatSeconds; one
//   older than kStaleSeconds, or one whose holder is a process on this host that is gone, is
//   stale and is broken under run.lock.break (created with O_EXCL too, so two newcomers cannot
//   both break it). A holder that finds its lock taken over ends at once rather than write on.
//
// Either way the file says who holds it (host, pid, start, command, state), for the message that
// refuses a second trainer. Trainers of both kinds renew the heartbeat, so neither kind mistakes
// a live holder of the other for a stale one. A holder that is ending (a stop signal seen, or
// the last checkpoint being written) says so: a newcomer waits up to run.lock_wait_s for it, which
// covers a requeued job that starts while the old one writes its checkpoint. Readers (eval,
// predict, inspect, plot, export) take no lock: checkpoints and `latest` are replaced by rename,
// so a reader always opens a complete file.

namespace mb::train {
namespace fs = std::filesystem;
namespace {

std::int64_t nowUnix() {
  return static_cast<std::int64_t>(std::time(nullptr));
}

// The command line of this process, as `ps` would show it.
std::string commandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> words;
  std::string word;
  for (char c : raw) {
    if (c != '\0') {
      word += c;
      continue;
    }
    words.push_back(word.find(' ') == std::string::npos ? word : "'" + word + "'");
    word.clear();
  }
  return str::join(words, " ");
}

std::string newToken() {
  std::random_device entropy;
  std::ostringstream token;
  token << std::hex << entropy() << entropy();
  return token.str();
}

std::string utcTime(std::int64_t unix) {
  std::time_t t = static_cast<std::time_t>(unix);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

// mountinfo escapes spaces and tabs in paths as octal (\040).
std::string unescapeMountPath(const std::string& path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '\\' && i + 3 < path.size()) {
      out += static_cast<char>(std::stoi(path.substr(i + 1, 3), nullptr, 8));
      i += 3;
      continue;
    }
    out += path[i];
  }
  return out;
}

bool isUnder(const fs::path& path, const fs::path& mountPoint) {
  auto p = path.begin();
  for (auto m = mountPoint.begin(); m != mountPoint.end(); ++m, ++p) {
    if (m->empty()) continue;  // the trailing "" of "/a/"
    if (p == path.end() || *p != *m) return false;
  }
  return true;
}

// What is in run.lock now, read again while a writer is seen mid-write.
struct LockFileView {
  bool exists = false;
  double ageSeconds = 0;  // since the holder's last heartbeat
  std::optional<LockOwner> owner;
};

LockFileView readLockFile(const std::string& path) {
  LockFileView view;
  for (int attempt = 0; attempt < 10; ++attempt) {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) return view;
    view.exists = true;
    view.ageSeconds = static_cast<double>(nowUnix() - info.st_mtime);
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    view.owner = parseLockOwner(text);
    if (view.owner) return view;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return view;
}

// A holder on this host whose process no longer exists (a kill -9, a crash).
bool holderIsGone(const LockOwner& owner) {
  return owner.host == env::hostName() && owner.pid > 0 &&
         ::kill(static_cast<pid_t>(owner.pid), 0) != 0 && errno == ESRCH;
}

// A file-kind holder that still owns the directory, whatever the kernel lock says.
bool fileHolderIsAlive(const LockFileView& view, const std::string& myToken) {
  if (!view.owner || view.owner->token == myToken) return false;
  const LockOwner& owner = *view.owner;
  return owner.kind == "file" && owner.state != "ended" &&
         view.ageSeconds < RunLock::kStaleSeconds && !holderIsGone(owner);
}

void writeOwner(int fd, const LockOwner& owner, const std::string& path) {
  const std::string text = formatLockOwner(owner);
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ::fsync(fd) != 0)
    throw ConfigError("cannot write " + path + ": " + std::strerror(errno),
                      "run.dir must be on a writable disk with free space");
}

enum class KernelLock { kTaken, kHeld, kUnsupported };

KernelLock lockWithKernel(int fd) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file
  if (::fcntl(fd, F_OFD_SETLK, &lock) == 0) return KernelLock::kTaken;
  if (errno == EAGAIN || errno == EACCES) return KernelLock::kHeld;
  return KernelLock::kUnsupported;  // ENOLCK, ENOSYS, EOPNOTSUPP, EINVAL (no OFD locks)
}

// One try at the lock: the open descriptor once taken, or the holder's record (when readable).
struct Attempt {
  int fd = -1;
  std::optional<LockOwner> holder;
  std::string unsupported;  // kernel locks failed: why, and the file kind is to be used
};

// Opens run.lock, creating it when missing; `created` says whether this call made it.
int openLockFile(const std::string& path, bool& created) {
  for (;;) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd >= 0) return fd;
    if (errno != ENOENT)  // ENOENT: its holder removed it between the two opens; again
      throw ConfigError("cannot open " + path + ": " + std::strerror(errno),
                        "run.dir must be a writable directory");
  }
}

Attempt tryKernel(const std::string& path, const std::string& myToken) {
  Attempt attempt;
  bool created = false;
  const int fd = openLockFile(path, created);
  const KernelLock result = lockWithKernel(fd);
  if (result == KernelLock::kUnsupported) {
    attempt.unsupported = std::string("locking it failed: ") + std::strerror(errno);
    ::close(fd);
    return attempt;
  }
  // A file this call created holds no record yet, and nobody else's: reading it would wait
  // out readLockFile's retries (200 ms) for a record that only this trainer will write.
  LockFileView view;
  if (created && result == KernelLock::kTaken)
    view.exists = true;
  else
    view = readLockFile(path);
  if (result == KernelLock::kHeld || fileHolderIsAlive(view, myToken)) {
    ::close(fd);
    attempt.holder = view.owner;
    return attempt;
  }
  attempt.fd = fd;
  return attempt;
}

// Removes a stale run.lock, as long as it is still the file found stale (same holder).
void breakStaleLock(const std::string& path, const LockFileView& stale) {
  const std::string guard = path + ".break";
  const int fd = ::open(guard.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    struct stat info {};
    // A breaker that died while it held the guard.
    if (::stat(guard.c_str(), &info) == 0 && nowUnix() - info.st_mtime > RunLock::kStaleSeconds)
      ::unlink(guard.c_str());
    return;
  }
  ::close(fd);
  const LockFileView now = readLockFile(path);
  const bool same = now.exists && now.owner.has_value() == stale.owner.has_value() &&
                    (!now.owner || now.owner->token == stale.owner->token);
  if (same && ::unlink(path.c_str()) == 0)
    trainLog().warn(
        "removed the stale {} of {} (heartbeat {:.0f} s old, limit {:g} s)", path,
        stale.owner ? stale.owner->describe(nowUnix()) : std::string("an unknown holder"),
        stale.ageSeconds, RunLock::kStaleSeconds);
  ::unlink(guard.c_str());
}

Attempt tryFile(const std::string& path) {
  for (int round = 0; round < 5; ++round) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return Attempt{fd, std::nullopt, ""};
    if (errno != EEXIST)
      throw ConfigError("cannot create " + path + ": " + std::strerror(errno),
                        "run.dir must be a writable directory");
    const LockFileView view = readLockFile(path);
    if (!view.exists) continue;  // its holder just removed it
    const bool free = view.ageSeconds >= RunLock::kStaleSeconds ||
                      (view.owner && (view.owner->state == "ended" || holderIsGone(*view.owner)));
    if (!free) return Attempt{-1, view.owner, ""};
    breakStaleLock(path, view);
  }
  return Attempt{-1, readLockFile(path).owner, ""};
}

[[noreturn]] void refuse(const std::string& runDir, const std::string& path,
                         const std::optional<LockOwner>& holder, double waited) {
  std::string who = holder ? "another trainer holds it: " + holder->describe(nowUnix())
                           : "another process holds " + path + " (its record is being written)";
  std::string message = "run.dir '" + runDir + "' is in use: " + who;
  if (waited > 0)
    message += fmt::format("; it was still held after waiting {:.0f} s (run.lock_wait_s)", waited);
  std::string stop = holder ? fmt::format(
                                  "stop it (on {}: kill -USR1 {} writes a checkpoint and "
                                  "exits 75)",
                                  holder->host, holder->pid)
                            : "stop it";
  throw ConfigError(
      message + " (lock: " + path + ")",
      "one run directory takes one trainer: wait for it to end or " + stop +
          ", then run this command again to resume; or give this run its own run.dir");
}

}  // namespace

std::string LockOwner::describe(std::int64_t nowUnixSeconds) const {
  return fmt::format("pid {} on host {}, started {} ({} s ago), {}{}", pid, host,
                     utcTime(startedUnix), nowUnixSeconds - startedUnix, state,
                     command.empty() ? "" : ": " + command);
}

std::string formatLockOwner(const LockOwner& owner) {
  return fmt::format(
      "# megabatch run lock: the trainer that writes this run directory\nhost: {}\npid: {}\n"
      "started: {}\nstarted_unix: {}\ncommand: {}\nstate: {}\nkind: {}\ntoken: {}\n",
      owner.host, owner.pid, utcTime(owner.startedUnix), owner.startedUnix, owner.command,
      owner.state, owner.kind, owner.token);
}

std::optional<LockOwner> parseLockOwner(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto colon = line.find(": ");
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    fields[line.substr(0, colon)] = line.substr(colon + 2);
  }
  // The token is written last: without it the record is torn.
  for (const char* key : {"host", "pid", "started_unix", "state", "kind", "token"})
    if (!fields.count(key)) return std::nullopt;
  LockOwner owner;
  try {
    owner.pid = std::stol(fields["pid"]);
    owner.startedUnix = std::stoll(fields["started_unix"]);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  owner.host = fields["host"];
  owner.command = fields["command"];
  owner.state = fields["state"];
  owner.kind = fields["kind"];
  owner.token = fields["token"];
  return owner;
}

std::string whyLocksAreNodeLocal(const std::string& fsType, const std::string& options) {
  const std::vector<std::string> words = str::split(options, ',');
  const auto hasWord = [&](const std::string& word) {
    return std::find(words.begin(), words.end(), word) != words.end();
  };
  if (fsType == "lustre") {
    if (hasWord("flock")) return "";
    return hasWord("localflock") ? "Lustre mounted with localflock keeps its locks on this node"
                                 : "Lustre mounted without the flock option gives no file locks";
  }
  if (str::startsWith(fsType, "nfs")) {
    if (hasWord("nolock")) return "NFS mounted with nolock keeps its locks on this node";
    for (const char* local : {"local_lock=all", "local_lock=posix"})
      if (hasWord(local))
        return std::string("NFS mounted with ") + local + " keeps its locks on this node";
    return "";
  }
  if (fsType == "beegfs")
    return "BeeGFS keeps locks on the node unless its client sets tuneUseGlobalFileLocks";
  if (str::startsWith(fsType, "fuse"))
    return "a FUSE file system (" + fsType + ") may keep its locks on this node";
  return "";
}

std::string whyLocksAreNodeLocalAt(const std::string& dir) {
  std::error_code ec;
  const fs::path where = fs::canonical(dir, ec);
  if (ec) return "";
  std::ifstream mounts("/proc/self/mountinfo");
  std::size_t bestDepth = 0;
  std::string fsType, options;
  for (std::string line; std::getline(mounts, line);) {
    // id parent dev root mountpoint options [optional...] - fstype source superoptions
    std::vector<std::string> fields = str::split(line, ' ');
    const auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 6 || std::distance(dash, fields.end()) < 4) continue;
    const fs::path mountPoint = unescapeMountPath(fields[4]);
    const std::size_t depth = std::distance(mountPoint.begin(), mountPoint.end());
    if (!isUnder(where, mountPoint) || depth < bestDepth) continue;
    bestDepth = depth;
    fsType = *(dash + 1);
    options = fields[5] + "," + *(dash + 3);
  }
  return whyLocksAreNodeLocal(fsType, options);
}

RunLock::RunLock(RunLockOptions options, std::string path, int fd, LockOwner owner)
    : options_(std::move(options)), path_(std::move(path)), fd_(fd), owner_(std::move(owner)) {
  writeOwner(fd_, owner_, path_);
  heartbeat_ = std::thread([this] { keepAlive(); });
}

std::unique_ptr<RunLock> RunLock::acquire(RunLockOptions options) {
  std::error_code ec;
  fs::create_directories(options.runDir, ec);
  if (ec)
    throw ConfigError("cannot create run.dir '" + options.runDir + "': " + ec.message(),
                      "set run.dir to a writable directory");
  const std::string path = (fs::path(options.runDir) / "run.lock").string();
  LockOwner me{env::hostName(), static_cast<long>(::getpid()),
               nowUnix(),       commandLine(),
               "training",      "kernel",
               newToken()};
  std::string whyFile = options.mode == "file" ? "run.lock = file" : "";
  if (options.mode == "auto") whyFile = whyLocksAreNodeLocalAt(options.runDir);
  const auto start = std::chrono::steady_clock::now();
  bool announced = false;
  for (;;) {
    Attempt attempt = whyFile.empty() ? tryKernel(path, me.token) : tryFile(path);
    if (!attempt.unsupported.empty()) {
      whyFile = path + ": " + attempt.unsupported;
      continue;
    }
    if (!whyFile.empty() && me.kind == "kernel") {
      me.kind = "file";
      trainLog().info("run.lock: a lock file with a heartbeat, not a file-system lock ({})",
                      whyFile);
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (attempt.fd >= 0) {
      if (announced)
        trainLog().info(
            "run.dir '{}': the trainer before this one ended; took over after waiting "
            "{:.1f} s",
            options.runDir, waited);
      return std::unique_ptr<RunLock>(new RunLock(options, path, attempt.fd, me));
    }
    if (!attempt.holder || !attempt.holder->ending() || waited >= options.waitSeconds)
      refuse(options.runDir, path, attempt.holder, announced ? waited : 0);
    if (!announced)
      trainLog().warn(
          "run.dir '{}' is held by {}; waiting up to {:g} s for it to end (run.lock_wait_s)",
          options.runDir, attempt.holder->describe(nowUnix()), options.waitSeconds);
    announced = true;
    dist::Watchdog::instance().progress();  // waiting here is this rank's work
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

RunLock::~RunLock() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
  }
  wake_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  try {
    if (owner_.kind == "file") {
      const LockFileView view = readLockFile(path_);
      if (view.owner && view.owner->token == owner_.token) ::unlink(path_.c_str());
    } else {
      owner_.state = "ended";
      writeOwner(fd_, owner_, path_);
    }
  } catch (const std::exception& error) {
    trainLog().warn("releasing {}: {}", path_, error.what());
  }
  ::close(fd_);  // releases the kernel lock
}

void RunLock::markFinishing() {
  setState("finishing");
}

void RunLock::setState(const std::string& state) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (owner_.state == state || owner_.state == "finishing") return;
  owner_.state = state;
  writeOwner(fd_, owner_, path_);
}

// The heartbeat: the file's modification time, and for a lock file a check that it is still ours.
void RunLock::beat() {
  std::lock_guard<std::mutex> lock(mutex_);  // not while setState rewrites the record
  ::futimens(fd_, nullptr);
  if (owner_.kind != "file") return;
  const LockFileView view = readLockFile(path_);
  if (view.owner && view.owner->token == owner_.token) return;
  dist::Watchdog::instance().terminate(
      path_ + " no longer names this trainer (" +
      (view.owner ? "it names " + view.owner->describe(nowUnix()) : std::string("it is gone")) +
      "): another trainer took the run directory, perhaps after this one's heartbeat stopped for "
      "over " +
      fmt::format("{:g}", kStaleSeconds) + " s; this trainer stops without writing more");
}

void RunLock::keepAlive() {
  auto lastBeat = std::chrono::steady_clock::now();
  bool stopSeen = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (wake_.wait_for(lock, std::chrono::seconds(1), [this] { return closing_; })) return;
    }
    if (!stopSeen && options_.stopping && options_.stopping()) {
      stopSeen = true;
      setState("stopping");
    }
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - lastBeat).count() >= kHeartbeatSeconds) {
      beat();
      lastBeat = now;
    }
  }
}

}  // namespace mb::train
