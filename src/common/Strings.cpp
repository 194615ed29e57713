#include "common/Strings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mb::str {

std::size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string::size_type start = 0;
  while (true) {
    auto end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

std::string trim(const std::string& text) {
  const char* space = " \t\r\n";
  auto begin = text.find_first_not_of(space);
  if (begin == std::string::npos) return {};
  auto end = text.find_last_not_of(space);
  return text.substr(begin, end - begin + 1);
}

bool startsWith(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

bool endsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string humanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), unit == 0 ? "%.0f %s" : "%.2f %s", bytes, units[unit]);
  return buffer;
}

std::string humanDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long total = std::lround(seconds);
  char buffer[32];
  if (total >= 3600) {
    std::snprintf(buffer, sizeof(buffer), "%ldh%02ldm", total / 3600, (total % 3600) / 60);
  } else if (total >= 60) {
    std::snprintf(buffer, sizeof(buffer), "%ldm%02lds", total / 60, total % 60);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lds", total);
  }
  return buffer;
}

std::string pad(std::int64_t value, int width) {
  std::string digits = std::to_string(value);
  if (static_cast<int>(digits.size()) < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

}  // namespace mb::str
