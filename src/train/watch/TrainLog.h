#pragma once
// The trainer's log channel, "train". One inline definition for all the trainer's files, so that
// a unity build (several .cpp files in one translation unit) sees it once.

#include "common/Log.h"

namespace mb::train {

inline spdlog::logger& trainLog() {
  return log::get("train");
}

}  // namespace mb::train
