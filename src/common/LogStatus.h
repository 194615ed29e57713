#pragma once
// Parts of the console logger (common/Log.cpp) that progress reporting needs
// (common/WorkProgress.h), kept out of Log.h, which nearly every file includes.
#include <string>

#include <spdlog/logger.h>

namespace mb::log {

// The logger of a subsystem tag that logs at the configured level on every rank: for the one
// rank that speaks for some work (the slowest; Note [Work progress]) when it is not rank 0.
spdlog::logger& speaker(const std::string& tag);
// The status line shown now ("" when none), so that a bar over it can put it back.
std::string statusLine();

}  // namespace mb::log
