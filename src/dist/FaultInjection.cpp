#include "dist/FaultInjection.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "common/Environment.h"
#include "common/Log.h"
#include "common/Strings.h"

namespace mb::dist {
namespace {

struct HangSpec {
  bool active = false;
  int rank = -1;
  std::string label;
  long skip = 0;
};

HangSpec parseHangSpec() {
  HangSpec spec;
  auto text = env::get("MEGABATCH_FAULT_HANG");
  if (!text) return spec;
  auto parts = str::split(*text, ':');
  if (parts.size() < 2) return spec;
  spec.active = true;
  spec.rank = std::stoi(parts[0]);
  spec.label = parts[1];
  spec.skip = parts.size() > 2 ? std::stol(parts[2]) : 0;
  return spec;
}

}  // namespace

void maybeInjectHang(int rank, const std::string& label) {
  static const HangSpec spec = parseHangSpec();
  static std::atomic<long> seen{0};
  if (!spec.active || rank != spec.rank || label.find(spec.label) == std::string::npos) return;
  if (seen++ < spec.skip) return;
  log::get("dist").warn("fault injection: rank {} hangs in '{}' (MEGABATCH_FAULT_HANG)", rank,
                        label);
  while (true)
    std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace mb::dist
