#include "train/Signals.h"

#include <csignal>

#include <atomic>

namespace mb::train {
namespace {

std::atomic<int> gSignal{0};

extern "C" void recordStopSignal(int signal) {
  if (signal == SIGINT && gSignal.load() != 0) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  gSignal.store(signal);
}

}  // namespace

void installStopSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = recordStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGTERM, SIGUSR1, SIGINT})
    sigaction(signal, &action, nullptr);
}

int pendingStopSignal() {
  return gSignal.load();
}

const char* signalName(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal";
  }
}

}  // namespace mb::train
