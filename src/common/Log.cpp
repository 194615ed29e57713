#include "common/Log.h"

#include <map>
#include <mutex>
#include <vector>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/Environment.h"

namespace mb::log {
namespace {

const char* const kTags[] = {"app", "config", "data", "dist", "train", "ckpt", "model", "bench"};

struct State {
  std::mutex mutex;
  int rank = -1;
  int worldSize = 1;
  spdlog::level::level_enum rootLevel = spdlog::level::info;
  std::vector<spdlog::sink_ptr> sinks;
  std::map<std::string, std::shared_ptr<spdlog::logger>> loggers;
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
  std::string pattern = "[%Y-%m-%d %H:%M:%S.%e] [" + rankLabel(s.rank, s.worldSize) + "] [%n] %^%l%$: %v";
  for (auto& sink : s.sinks) sink->set_pattern(pattern);
  for (auto& [tag, logger] : s.loggers) {
    logger->set_level(effectiveLevel(s));
    logger->flush_on(spdlog::level::warn);
  }
}

void ensureInitialised(State& s) {
  if (s.rank >= 0) return;
  s.rank = env::launcherRank();
  s.worldSize = env::launcherWorldSize();
  s.sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
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
  auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  s.sinks.push_back(sink);
  for (auto& [tag, logger] : s.loggers) logger->sinks().push_back(sink);
  refresh(s);
}

void flush() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (auto& [tag, logger] : s.loggers) logger->flush();
}

spdlog::logger& get(const std::string& tag) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ensureInitialised(s);
  auto it = s.loggers.find(tag);
  if (it == s.loggers.end()) {
    auto logger = std::make_shared<spdlog::logger>(tag, s.sinks.begin(), s.sinks.end());
    it = s.loggers.emplace(tag, logger).first;
    refresh(s);
  }
  return *it->second;
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
