#pragma once
// Small string helpers shared by the config, CLI, and data layers.
#include <cstdint>
#include <string>
#include <vector>

namespace mb::str {

// Levenshtein distance (insert, delete, substitute: cost 1 each).
std::size_t editDistance(const std::string& a, const std::string& b);

std::vector<std::string> split(const std::string& text, char separator);
std::string join(const std::vector<std::string>& parts, const std::string& separator);
std::string trim(const std::string& text);
bool startsWith(const std::string& text, const std::string& prefix);
bool endsWith(const std::string& text, const std::string& suffix);

// "[2, 3, 4]": a shape for messages, from any range of integers (std::vector, at::IntArrayRef).
template <typename Dims>
std::string shapeText(const Dims& dims) {
  std::string text = "[";
  for (auto d : dims)
    text += (text.size() > 1 ? ", " : "") + std::to_string(d);
  return text + "]";
}

// "1.50 GiB", "12.0 MiB", "512 B".
std::string humanBytes(double bytes);
// "1h02m", "3m05s", "12s".
std::string humanDuration(double seconds);
// Zero-padded decimal: pad(42, 8) == "00000042".
std::string pad(std::int64_t value, int width);

}  // namespace mb::str
