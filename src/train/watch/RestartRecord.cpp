#include "train/watch/RestartRecord.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "common/Environment.h"
#include "train/watch/Metrics.h"

namespace mb::train {
namespace {

std::int64_t integerOr(const char* name, std::int64_t fallback) {
  const std::optional<long> value = env::getInt(name);
  return value ? static_cast<std::int64_t>(*value) : fallback;
}

}  // namespace

std::optional<RestartInfo> restartFromEnvironment() {
  const std::optional<std::string> counter = env::get("MEGABATCH_RESTART");
  if (!counter || counter->empty()) return std::nullopt;
  RestartInfo info;
  // "K/N" or "K": a malformed counter still records the restart, with what can be read.
  info.restart = std::strtoll(counter->c_str(), nullptr, 10);
  const std::size_t slash = counter->find('/');
  if (slash != std::string::npos)
    info.maxRestarts = std::strtoll(counter->c_str() + slash + 1, nullptr, 10);
  info.reason = env::get("MEGABATCH_RESTART_REASON").value_or("restarted");
  info.ranksBefore = integerOr("MEGABATCH_RESTART_RANKS_BEFORE", -1);
  info.lostHosts = env::get("MEGABATCH_RESTART_LOST_HOSTS").value_or("");
  info.failedStep = integerOr("MEGABATCH_RESTART_FAILED_STEP", -1);
  if (auto at = env::get("MEGABATCH_RESTART_FAILED_AT")) info.failedAt = std::atof(at->c_str());
  return info;
}

std::string describeRestart(const RestartInfo& info, std::int64_t resumeStep, int ranksAfter,
                            double now, JsonRecord& record) {
  record.add("event", "restart").add("step", resumeStep).add("restart", info.restart);
  if (info.maxRestarts > 0) record.add("max_restarts", info.maxRestarts);
  record.add("reason", info.reason);
  if (info.ranksBefore > 0) record.add("ranks_before", info.ranksBefore);
  record.add("ranks_after", static_cast<std::int64_t>(ranksAfter));
  record.add("lost_hosts", info.lostHosts).add("resume_step", resumeStep);
  std::string text = fmt::format(
      "restart {}{} ({}): ", info.restart,
      info.maxRestarts > 0 ? fmt::format(" of {}", info.maxRestarts) : std::string(), info.reason);
  text += info.ranksBefore > 0 ? fmt::format("{} ranks -> {}", info.ranksBefore, ranksAfter)
                               : fmt::format("{} ranks", ranksAfter);
  if (!info.lostHosts.empty()) text += ", lost " + info.lostHosts;
  text += fmt::format(", resumed from step {}", resumeStep);
  if (info.failedStep >= 0) {
    // Steps the failed run had taken past its checkpoint: this run takes them again.
    const std::int64_t redone = std::max<std::int64_t>(info.failedStep - resumeStep, 0);
    record.add("failed_step", info.failedStep).add("steps_redone", redone);
    text += fmt::format(" ({} steps redone)", redone);
  }
  if (info.failedAt > 0) {
    const double seconds = now - info.failedAt;
    record.add("seconds_from_failure", seconds);
    text += fmt::format("; {:.1f} s from the failure to this run's first step", seconds);
  }
  record.addTime("time", now);
  return text;
}

}  // namespace mb::train
