// libFuzzer target: bytes -> YAML text -> the config loader, overrides, and validator, as
// `megabatch train --config FILE key=value ...` runs them.
//
// Input: the config file's text. Comment lines of the form `#@ key=value` are also passed as
// dotted overrides (YAML ignores them, so every seed is still a plain config file).
//
// Properties checked:
//  - the only exception is an mb::Error of exit code 2 (ConfigError) with a message; anything
//    else (another exception, a crash, a sanitizer report, a leak) is a bug;
//  - an accepted config survives --print-config: configToYaml() parses back, validates, and
//    prints the same text again (the run directory's config.yaml is reloaded on resume).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/Error.h"
#include "common/Log.h"
#include "config/ConfigLoader.h"

namespace {

// The `#@ key=value` comment lines of the text, in order.
std::vector<std::string> overridesOf(const std::string& text) {
  std::vector<std::string> overrides;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (text.compare(start, 3, "#@ ") == 0)
      overrides.push_back(text.substr(start + 3, end - start - 3));
    start = end + 1;
  }
  return overrides;
}

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config fuzzer: %s\n%s\n", what, detail.c_str());
  std::abort();
}

void checkRoundTrip(const mb::Config& config) {
  std::string printed = mb::configToYaml(config);
  std::string again;
  try {
    again = mb::configToYaml(mb::parseConfig(printed, "printed config"));
  } catch (const mb::Error& e) {
    fail("--print-config output does not load again", e.message() + "\n--- printed:\n" + printed);
  }
  if (again != printed)
    fail("--print-config output changes when loaded again",
         "--- first:\n" + printed + "--- second:\n" + again);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool quiet = [] {
    mb::log::setLevel("off");
    return true;
  }();
  (void)quiet;
  std::string text(reinterpret_cast<const char*>(data), size);
  mb::Config config;
  try {
    config = mb::parseConfig(text, "fuzz.yaml", overridesOf(text));
  } catch (const mb::Error& e) {
    if (e.code() != mb::ExitCode::kUsage)
      fail("a config problem with an exit code other than 2", e.message());
    if (e.message().empty()) fail("a config error without a message", text);
    return 0;
  }
  checkRoundTrip(config);
  return 0;
}
