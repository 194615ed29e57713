#pragma once
// Rules across and within config fields, one function per rule (see ConfigValidator.cpp).
#include <string>
#include <vector>

#include "config/Config.h"

namespace mb {

// Every rule the config breaks, each naming the key(s) and the bad value.
std::vector<std::string> validateConfig(const Config& config);
// Throws one ConfigError listing every problem (exit code 2).
void requireValidConfig(const Config& config);

}  // namespace mb
