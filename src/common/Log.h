#pragma once
// Logging: spdlog with the rank in every line and a subsystem tag per logger, e.g.
//   [2026-11-21 10:00:00.123] [r1/4] [data] error: /data/x.h5: dataset /targets missing
// Rank 0 logs at the configured level; other ranks log warnings and errors only, so progress
// comes from rank 0 and errors from every rank (MEGABATCH_LOG_ALL_RANKS=1 lifts the filter).
#include <memory>
#include <string>

#include <spdlog/logger.h>

namespace mb::log {

// (Re)initialises every logger for this process's rank. Safe to call again once the real rank
// is known (after MPI init); before that the launcher's environment variables are used.
void init(int rank, int worldSize);
// Sets the level on rank 0 (other ranks keep warn unless MEGABATCH_LOG_ALL_RANKS=1).
void setLevel(const std::string& level);
// Adds a file sink (the run directory's train.log) to every logger.
void addFileSink(const std::string& path);
// Removes it again (flushed): a walk-forward's folds each log to their own train.log.
void removeFileSink(const std::string& path);
// Flushes every sink and erases the status line: call before the process exits abnormally.
void flush();
// A one-line status (the rank-0 progress bar) kept at the bottom of the console: log lines are
// printed above it and it is redrawn after each. An empty text erases it. Only for a terminal.
void setStatusLine(const std::string& text);
// True when this process's console is a terminal a person watches: stderr itself, or, under
// mpirun (which pipes the ranks' stderr), the launching mpirun's stderr. TERM=dumb says no.
bool consoleIsTerminal();
// Columns of that terminal (80 when it cannot be asked).
int consoleColumns();
// The logger for a subsystem tag: "app", "config", "data", "dist", "train", "ckpt", "model".
spdlog::logger& get(const std::string& tag);

int rank();
int worldSize();

}  // namespace mb::log
