#include "data/ValueScan.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include "common/Error.h"

namespace mb::data {
namespace {

constexpr std::int64_t kGrainElements = std::int64_t{1} << 16;
constexpr std::int64_t kDevicePieceElements = std::int64_t{1} << 26;

// First row whose elements (viewed as T) satisfy `bad`, scanning in parallel row blocks.
template <class T, class Bad>
std::int64_t scanRows(const at::Tensor& t, Bad bad) {
  std::int64_t rows = t.size(0);
  std::int64_t width = t.numel() / rows;
  const T* data = static_cast<const T*>(t.data_ptr());
  std::atomic<std::int64_t> first{rows};
  std::int64_t grain = std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(1, width));
  at::parallel_for(0, rows, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end && r < first.load(std::memory_order_relaxed); ++r) {
      const T* row = data + r * width;
      bool any = false;
      for (std::int64_t i = 0; i < width; ++i)
        any |= bad(row[i]);
      if (!any) continue;
      std::int64_t seen = first.load();
      while (r < seen && !first.compare_exchange_weak(seen, r)) {
      }
      return;
    }
  });
  return first.load() == rows ? -1 : first.load();
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
  // An IEEE value is NaN or infinite exactly when its exponent bits are all ones.
  switch (t.scalar_type()) {
    case at::kFloat:
      return scanRows<std::uint32_t>(
          t, [](std::uint32_t b) { return (b & 0x7f800000u) == 0x7f800000u; });
    case at::kDouble:
      return scanRows<std::uint64_t>(
          t, [](std::uint64_t b) { return (b & 0x7ff0000000000000ull) == 0x7ff0000000000000ull; });
    case at::kBFloat16:
      return scanRows<std::uint16_t>(t, [](std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u; });
    case at::kHalf:
      return scanRows<std::uint16_t>(t, [](std::uint16_t b) { return (b & 0x7c00u) == 0x7c00u; });
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
  auto outside = [low, high](auto v) {
    auto wide = static_cast<std::int64_t>(v);
    return (wide < low) | (wide >= high);
  };
  switch (t.scalar_type()) {
    case at::kByte:
      return scanRows<std::uint8_t>(t, outside);
    case at::kChar:
      return scanRows<std::int8_t>(t, outside);
    case at::kShort:
      return scanRows<std::int16_t>(t, outside);
    case at::kInt:
      return scanRows<std::int32_t>(t, outside);
    case at::kLong:
      return scanRows<std::int64_t>(t, outside);
    default:
      throw RuntimeError(std::string("firstOutOfRangeRow: not an integer tensor: ") +
                         c10::toString(t.scalar_type()));
  }
}

}  // namespace mb::data
