#include "data/pipeline/ValueScan.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include "common/Error.h"

namespace mb::data {
namespace {

constexpr std::int64_t kBlockElements = std::int64_t{1} << 16;
constexpr std::int64_t kDevicePieceElements = std::int64_t{1} << 26;

// The first element (flat index) for which flag(x) has `badBit` set, or -1. Each block is
// first OR-reduced branch-free (the compiler vectorises it), and only a block with a hit is
// searched element by element.
template <class T, class Flag>
std::int64_t firstFlagged(const at::Tensor& t, Flag flag, T badBit) {
  const T* data = static_cast<const T*>(t.data_ptr());
  std::int64_t n = t.numel();
  std::atomic<std::int64_t> first{n};
  std::int64_t blocks = (n + kBlockElements - 1) / kBlockElements;
  at::parallel_for(0, blocks, 1, [&](std::int64_t firstBlock, std::int64_t lastBlock) {
    for (std::int64_t block = firstBlock; block < lastBlock; ++block) {
      std::int64_t begin = block * kBlockElements;
      if (begin >= first.load(std::memory_order_relaxed)) return;
      std::int64_t end = std::min(n, begin + kBlockElements);
      T acc = 0;
      for (std::int64_t i = begin; i < end; ++i)
        acc |= flag(data[i]);
      if (!(acc & badBit)) continue;
      std::int64_t hit = begin;
      while (!(flag(data[hit]) & badBit))
        ++hit;
      std::int64_t seen = first.load();
      while (hit < seen && !first.compare_exchange_weak(seen, hit)) {
      }
      return;  // later blocks of this range cannot hold an earlier hit
    }
  });
  return first.load() == n ? -1 : first.load();
}

// The row (dim 0) of flat element `element`, or -1.
std::int64_t rowOf(const at::Tensor& t, std::int64_t element) {
  return element < 0 ? -1 : element / (t.numel() / t.size(0));
}

// Device tensors: masks in pieces (the caching allocator makes the temporaries cheap).
template <class Mask>
std::int64_t scanDevice(const at::Tensor& t, Mask mask) {
  std::int64_t rows = t.size(0);
  std::int64_t step =
      std::max<std::int64_t>(1, kDevicePieceElements / std::max<std::int64_t>(1, t.numel() / rows));
  for (std::int64_t begin = 0; begin < rows; begin += step) {
    std::int64_t n = std::min(step, rows - begin);
    at::Tensor bad = mask(t.narrow(0, begin, n)).reshape({n, -1}).any(1);
    if (bad.any().item<bool>()) return begin + bad.nonzero()[0][0].item<std::int64_t>();
  }
  return -1;
}

bool empty(const at::Tensor& t) {
  return t.dim() == 0 || t.size(0) == 0 || t.numel() == 0;
}

}  // namespace

std::int64_t firstNonFiniteRow(const at::Tensor& t) {
  if (empty(t)) return -1;
  if (!t.device().is_cpu() || !t.is_contiguous())
    return scanDevice(t, [](const at::Tensor& piece) { return piece.isfinite().logical_not(); });
  // An IEEE value is NaN or infinite exactly when its exponent bits are all ones: adding one
  // unit of the lowest exponent bit to the masked exponent then carries into the sign bit.
  switch (t.scalar_type()) {
    case at::kFloat:
      return rowOf(
          t, firstFlagged<std::uint32_t>(
                 t, [](std::uint32_t b) { return (b & 0x7f800000u) + 0x00800000u; }, 0x80000000u));
    case at::kDouble:
      return rowOf(t, firstFlagged<std::uint64_t>(
                          t,
                          [](std::uint64_t b) {
                            return (b & 0x7ff0000000000000ull) + 0x0010000000000000ull;
                          },
                          0x8000000000000000ull));
    case at::kBFloat16:
      return rowOf(t, firstFlagged<std::uint16_t>(
                          t, [](std::uint16_t b) { return std::uint16_t((b & 0x7f80u) + 0x0080u); },
                          std::uint16_t{0x8000u}));
    case at::kHalf:
      return rowOf(t, firstFlagged<std::uint16_t>(
                          t, [](std::uint16_t b) { return std::uint16_t((b & 0x7c00u) + 0x0400u); },
                          std::uint16_t{0x8000u}));
    default:
      return -1;  // integers are always finite
  }
}

std::int64_t firstOutOfRangeRow(const at::Tensor& t, std::int64_t low, std::int64_t high) {
  if (empty(t)) return -1;
  if (!t.device().is_cpu() || !t.is_contiguous())
    return scanDevice(t, [&](const at::Tensor& piece) {
      at::Tensor wide = piece.to(at::kLong);
      return wide.lt(low).logical_or(wide.ge(high));
    });
  auto scan = [&](auto zero) {
    using T = decltype(zero);
    auto outside = [low, high](T v) {
      auto wide = static_cast<std::int64_t>(v);
      return static_cast<std::uint8_t>((wide < low) | (wide >= high));
    };
    return rowOf(t, firstFlagged<T>(
                        t, [&](T v) { return static_cast<T>(outside(v)); }, T{1}));
  };
  switch (t.scalar_type()) {
    case at::kByte:
      return scan(std::uint8_t{0});
    case at::kChar:
      return scan(std::int8_t{0});
    case at::kShort:
      return scan(std::int16_t{0});
    case at::kInt:
      return scan(std::int32_t{0});
    case at::kLong:
      return scan(std::int64_t{0});
    default:
      throw RuntimeError(std::string("firstOutOfRangeRow: not an integer tensor: ") +
                         c10::toString(t.scalar_type()));
  }
}

}  // namespace mb::data
