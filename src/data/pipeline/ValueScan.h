#pragma once
// Scans of resident tensors for bad values (Note [Schema validation], pass 3). On the CPU each
// is one multi-threaded pass over the raw values with no temporaries (the loader checks every
// byte it loads, so this runs at memory speed); on a device it uses tensor ops.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace mb::data {

// The first row (dim 0) of a floating tensor holding a NaN or an infinity, or -1.
std::int64_t firstNonFiniteRow(const at::Tensor& t);
// The first row of an integer tensor holding a value outside [low, high), or -1.
std::int64_t firstOutOfRangeRow(const at::Tensor& t, std::int64_t low, std::int64_t high);

}  // namespace mb::data
