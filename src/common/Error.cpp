#include "common/Error.h"

namespace mb {

const char* exitCodeName(ExitCode code) {
  switch (code) {
    case ExitCode::kOk:
      return "ok";
    case ExitCode::kFailure:
      return "failure";
    case ExitCode::kUsage:
      return "usage";
    case ExitCode::kData:
      return "data";
    case ExitCode::kCheckpoint:
      return "checkpoint";
    case ExitCode::kPreempted:
      return "preempted";
  }
  return "unknown";
}

static std::string joinMessage(const std::string& message, const std::string& hint) {
  return hint.empty() ? message : message + "\n  hint: " + hint;
}

Error::Error(ExitCode code, std::string message, std::string hint)
    : std::runtime_error(joinMessage(message, hint)),
      code_(code),
      message_(std::move(message)),
      hint_(std::move(hint)) {}

Error makeError(ExitCode code, std::string message, std::string hint) {
  return Error(code, std::move(message), std::move(hint));
}

}  // namespace mb
