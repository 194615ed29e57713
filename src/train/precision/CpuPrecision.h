#pragma once
// Note [CPU precision]: whether bf16 (or fp16) pays on this CPU, found out before training.
// LibTorch runs CPU autocast on any x86 CPU, but only CPUs with bf16 units (AVX512-BF16 on
// Cooper Lake and Zen 4 and later, AMX-BF16 on Sapphire Rapids) run its matrix products in
// bf16; the others emulate them, about 30x slower than fp32 (lstm-multitf evaluated at
// 2.45 samples/s in bf16 against 77.3 in fp32 on an AVX2 EPYC), and nothing said so.
// We use both sources, because neither is enough alone:
//  - the CPU flags (/proc/cpuinfo) say *why*: bf16 units or none. They cannot say what a model
//    pays: on a CPU with avx512_bf16, small products still lose to the casts around them.
//  - a timed probe says *how much*: one matrix product at the model's width (rows x width by
//    width x 4 width, the shape of an LSTM gate or a transformer MLP), in fp32 and under
//    autocast, about 0.1 s in all. A whole forward pass would be more faithful, but it has side
//    effects (the LSTM's lane states) and can take minutes when bf16 is emulated.
// train warns once, naming train.precision=fp32 and auto, when the probe measures reduced
// precision at least kSlowerRatio slower than fp32, or when the CPU has no units for it at all.
#include <cstdint>
#include <string>

#include "config/Config.h"

namespace mb::train {

struct CpuPrecisionCost {
  bool hasUnits = false;  // the CPU flags name units for the dtype
  std::string flags;      // the flags that decided it, or "no avx512_bf16 or amx_bf16"
  double fp32Ms = 0;      // the probe's product, per call
  double reducedMs = 0;
  double slowdown() const { return fp32Ms > 0 ? reducedMs / fp32Ms : 0; }
};

// At least this much slower than fp32 is worth a warning.
constexpr double kSlowerRatio = 1.2;

// The CPU's flags line (MEGABATCH_FAULT_CPU_FLAGS when set; "" where /proc/cpuinfo has none).
std::string cpuFlags();

// Whether `flags` name units for `dtype` (kBf16 or kFp16), and which.
bool cpuHasUnitsFor(DType dtype, const std::string& flags, std::string* found);

// Measures the probe for `dtype` at `width` (model.hidden) with the current intra-op threads.
CpuPrecisionCost measureCpuPrecision(DType dtype, std::int64_t width);

// The warning train writes, or "" when reduced precision pays here.
std::string cpuPrecisionWarning(DType dtype, const CpuPrecisionCost& cost);

}  // namespace mb::train
