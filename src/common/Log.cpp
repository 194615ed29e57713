#include "common/Log.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/Environment.h"
#include "common/LogStatus.h"

namespace mb::log {
namespace {

const char* const kTags[] = {"app", "config", "data", "dist", "train", "ckpt", "model", "bench"};

// The console sink: spdlog's colour stderr sink, plus a status line that log lines do not tear.
class ConsoleSink final : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg& message) override {
    std::lock_guard<std::mutex> lock(mutex_);
    eraseStatus();
    inner_.log(message);
    inner_.flush();
    drawStatus();
  }
  void flush() override {
    std::lock_guard<std::mutex> lock(mutex_);
    inner_.flush();
  }
  void set_pattern(const std::string& pattern) override { inner_.set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_.set_formatter(std::move(formatter));
  }
  std::string status() {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
  }
  void setStatus(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    eraseStatus();
    status_ = text;
    drawStatus();
  }

 private:
  void eraseStatus() {
    if (!shown_) return;
    std::fputs("\r\033[K", stderr);
    shown_ = false;
  }
  void drawStatus() {
    if (status_.empty()) return;
    std::fputs(status_.c_str(), stderr);
    std::fflush(stderr);
    shown_ = true;
  }

  std::mutex mutex_;
  spdlog::sinks::stderr_color_sink_st inner_;
  std::string status_;
  bool shown_ = false;
};

// train.log: spdlog's file sink, whose write errors (a full disk) would reach spdlog's handler,
// which prints "LOG ERROR" for every line. Here the first failure says once, on stderr, that
// lines are lost until the disk has room (the console keeps them all), and writing goes on.
class LogFileSink final : public spdlog::sinks::sink {
 public:
  explicit LogFileSink(const std::string& path) : path_(path), inner_(path, /*truncate=*/false) {}
  void log(const spdlog::details::log_msg& message) override {
    std::lock_guard<std::mutex> lock(mutex_);
    guarded([&] { inner_.log(message); });
  }
  void flush() override {
    std::lock_guard<std::mutex> lock(mutex_);
    guarded([&] { inner_.flush(); });
  }
  const std::string& path() const { return path_; }
  void set_pattern(const std::string& pattern) override { inner_.set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    inner_.set_formatter(std::move(formatter));
  }

 private:
  template <typename Write>
  void guarded(const Write& write) {
    try {
      write();
      failing_ = false;
    } catch (const spdlog::spdlog_ex& error) {
      if (failing_) return;
      failing_ = true;
      std::fprintf(stderr,
                   "megabatch: cannot write %s (%s): its lines are lost until the disk has room; "
                   "the console shows every line\n",
                   path_.c_str(), error.what());
    }
  }

  std::mutex mutex_;
  std::string path_;
  spdlog::sinks::basic_file_sink_st inner_;
  bool failing_ = false;
};

struct State {
  std::mutex mutex;
  int rank = -1;
  int worldSize = 1;
  spdlog::level::level_enum rootLevel = spdlog::level::info;
  std::vector<spdlog::sink_ptr> sinks;
  std::shared_ptr<ConsoleSink> console;
  std::map<std::string, std::shared_ptr<spdlog::logger>> loggers;
  std::map<std::string, std::shared_ptr<spdlog::logger>> speakers;  // unfiltered on every rank
};

State& state() {
  static State instance;
  return instance;
}

std::string rankLabel(int rank, int worldSize) {
  int width = static_cast<int>(std::to_string(std::max(worldSize - 1, 0)).size());
  std::string digits = std::to_string(rank);
  if (static_cast<int>(digits.size()) < width) digits.insert(0, width - digits.size(), '0');
  return "r" + digits + "/" + std::to_string(worldSize);
}

spdlog::level::level_enum effectiveLevel(const State& s) {
  if (s.rank == 0 || env::get("MEGABATCH_LOG_ALL_RANKS")) return s.rootLevel;
  return std::max(s.rootLevel, spdlog::level::warn);
}

// Applies pattern and level to every logger; callers hold the mutex.
void refresh(State& s) {
  std::string pattern =
      "[%Y-%m-%d %H:%M:%S.%e] [" + rankLabel(s.rank, s.worldSize) + "] [%n] %^%l%$: %v";
  for (auto& sink : s.sinks)
    sink->set_pattern(pattern);
  for (auto& [tag, logger] : s.loggers) {
    logger->set_level(effectiveLevel(s));
    logger->flush_on(spdlog::level::warn);
  }
  for (auto& [tag, logger] : s.speakers) {
    logger->set_level(s.rootLevel);
    logger->flush_on(spdlog::level::info);
  }
}

void ensureInitialised(State& s) {
  if (s.rank >= 0) return;
  s.rank = env::launcherRank();
  s.worldSize = env::launcherWorldSize();
  s.console = std::make_shared<ConsoleSink>();
  s.sinks.push_back(s.console);
  for (const char* tag : kTags) {
    s.loggers[tag] = std::make_shared<spdlog::logger>(tag, s.sinks.begin(), s.sinks.end());
  }
  refresh(s);
}

}  // namespace

void init(int rank, int worldSize) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ensureInitialised(s);
  s.rank = rank;
  s.worldSize = worldSize;
  refresh(s);
}

void setLevel(const std::string& level) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ensureInitialised(s);
  s.rootLevel = spdlog::level::from_str(level);
  refresh(s);
}

void addFileSink(const std::string& path) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ensureInitialised(s);
  auto sink = std::make_shared<LogFileSink>(path);
  s.sinks.push_back(sink);
  for (auto& [tag, logger] : s.loggers)
    logger->sinks().push_back(sink);
  for (auto& [tag, logger] : s.speakers)
    logger->sinks().push_back(sink);
  refresh(s);
}

void removeFileSink(const std::string& path) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto isIt = [&](const spdlog::sink_ptr& sink) {
    const auto* file = dynamic_cast<const LogFileSink*>(sink.get());
    return file != nullptr && file->path() == path;
  };
  for (const auto& sink : s.sinks)
    if (isIt(sink)) sink->flush();
  const auto drop = [&](std::vector<spdlog::sink_ptr>& sinks) {
    sinks.erase(std::remove_if(sinks.begin(), sinks.end(), isIt), sinks.end());
  };
  drop(s.sinks);
  for (auto& [tag, logger] : s.loggers)
    drop(logger->sinks());
  for (auto& [tag, logger] : s.speakers)
    drop(logger->sinks());
}

void flush() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.console) s.console->setStatus("");
  for (auto& [tag, logger] : s.loggers)
    logger->flush();
}

void setStatusLine(const std::string& text) {
  State& s = state();
  std::shared_ptr<ConsoleSink> console;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    ensureInitialised(s);
    console = s.console;
  }
  console->setStatus(text);
}

namespace {

// mpirun pipes each rank's stderr to itself; whether a person sees it depends on mpirun's own
// stderr, which /proc shows us (Linux).
std::string launcherStderrPath() {
  const std::string parent = "/proc/" + std::to_string(getppid());
  std::ifstream commFile(parent + "/comm");
  std::string comm;
  std::getline(commFile, comm);
  if (comm != "mpirun" && comm != "mpiexec" && comm != "orterun" && comm != "prterun") return "";
  char target[256] = {0};
  ssize_t n = readlink((parent + "/fd/2").c_str(), target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

bool isTerminalPath(const std::string& path) {
  return path.rfind("/dev/pts/", 0) == 0 || path.rfind("/dev/tty", 0) == 0;
}

}  // namespace

bool consoleIsTerminal() {
  // Asked once per training step (the slow-step progress): a process's stderr does not change,
  // and the launcher check reads /proc.
  static const bool terminal = [] {
    if (auto term = env::get("TERM"); term && *term == "dumb") return false;
    if (isatty(STDERR_FILENO)) return true;
    return isTerminalPath(launcherStderrPath());
  }();
  return terminal;
}

int consoleColumns() {
  winsize size{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  const std::string path = launcherStderrPath();
  if (isTerminalPath(path)) {
    int fd = open(path.c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK);
    if (fd >= 0) {
      bool ok = ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0;
      close(fd);
      if (ok) return size.ws_col;
    }
  }
  return 80;
}

namespace {
// The logger of `tag` in one of State's tables, made on first use with the shared sinks.
spdlog::logger& loggerIn(std::map<std::string, std::shared_ptr<spdlog::logger>> State::*table,
                         const std::string& tag) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ensureInitialised(s);
  auto& loggers = s.*table;
  auto it = loggers.find(tag);
  if (it == loggers.end()) {
    auto logger = std::make_shared<spdlog::logger>(tag, s.sinks.begin(), s.sinks.end());
    it = loggers.emplace(tag, logger).first;
    refresh(s);
  }
  return *it->second;
}
}  // namespace

spdlog::logger& get(const std::string& tag) {
  return loggerIn(&State::loggers, tag);
}

spdlog::logger& speaker(const std::string& tag) {
  return loggerIn(&State::speakers, tag);
}

std::string statusLine() {
  State& s = state();
  std::shared_ptr<ConsoleSink> console;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    ensureInitialised(s);
    console = s.console;
  }
  return console->status();
}

int rank() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ensureInitialised(s);
  return s.rank;
}

int worldSize() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ensureInitialised(s);
  return s.worldSize;
}

}  // namespace mb::log
