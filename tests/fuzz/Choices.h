#pragma once
// The fuzz input read as a stream of choices (shared by the structured fuzzers: data_schema,
// checkpoint). Byte 0 of every choice is the valid one in those fuzzers, so an all-zero input
// describes a valid file.
#include <hdf5.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace mb::fuzz {

// Reads choices from the front of the input; an exhausted input reads as zeros.
class Choices {
 public:
  Choices(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t next() { return pos_ < size_ ? data_[pos_++] : 0; }
  int pick(int n) { return next() % n; }
  std::int64_t range(std::int64_t low, std::int64_t high) {
    return low + static_cast<std::int64_t>(next()) % (high - low + 1);
  }
  bool flag() { return next() & 1; }
  // A size in [0, 255] that is `usual` when the input byte is 0.
  hsize_t size(std::uint8_t usual) { return next() ^ usual; }
  // The next `n` input bytes (zero-padded).
  std::vector<std::uint8_t> bytes(std::size_t n) {
    std::vector<std::uint8_t> out(n, 0);
    std::size_t have = std::min(n, size_ - std::min(pos_, size_));
    if (have > 0) std::memcpy(out.data(), data_ + pos_, have);
    pos_ += have;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace mb::fuzz
