#pragma once
// A small deterministic generator for the dataset tools: the same seed gives the same file on
// every platform (std::normal_distribution differs between standard libraries).
#include <cmath>
#include <cstdint>

namespace mb::data {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n) (n > 0; the modulo bias is negligible for n << 2^64).
  std::int64_t below(std::int64_t n) {
    return static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(n));
  }
  // Standard normal (Box-Muller, one value per call).
  double normal() {
    double u = 1.0 - uniform();  // (0, 1]
    double v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  std::uint64_t state_;
};

}  // namespace mb::data
