#pragma once
// Mixed precision with fp32 master weights (DESIGN.md "Precision and speed on GPU"): inside an
// AutocastScope, matmul-heavy ops run in bf16 or fp16 while parameters, optimizer state and
// reductions stay fp32 (fp16 adds loss scaling: Note [Loss scaling] in LossScaler.h). On CUDA,
// TF32 and cuDNN benchmark are switched on once at start-up.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>

#include "common/TorchCompat.h"
#include "config/Config.h"
#include "train/loop/TrainerState.h"

namespace mb::train {

class AutocastScope {
 public:
  // `precision` is a resolved one (choosePrecision): fp32 leaves autocast off.
  AutocastScope(c10::DeviceType device, DType precision)
      : device_(device), enabled_(precision != DType::kFp32) {
    if (!enabled_) return;
    dtype_ = precision == DType::kFp16 ? at::kHalf : at::kBFloat16;
    previous_ = compat::autocastEnabled(device_);
    compat::setAutocast(device_, true, dtype_);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    compat::setAutocast(device_, previous_, dtype_);
    // Casted weight copies are cached per forward; the next forward must see updated weights.
    compat::clearAutocastCache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool enabled_;
  at::ScalarType dtype_ = at::kBFloat16;
  bool previous_ = false;
};

// What train.precision runs as on a device, and why, for the log.
struct PrecisionChoice {
  DType dtype = DType::kFp32;
  std::string reason;
};

// train.precision on `device`: auto is bf16 on GPUs with BF16 (compute capability >= 8.0), fp16
// on older GPUs and fp32 on the CPU. Throws ConfigError (exit 2) for what the device cannot
// run: bf16 on a GPU without BF16 (the message names fp16 and auto), fp16 on the CPU with a
// LibTorch older than 2.2.
PrecisionChoice choosePrecision(Precision requested, c10::Device device);

// Note [Precision of a new run]
// eval, predict and sample load a checkpoint on whatever hardware is at hand, often not the
// hardware it trained on: a bf16 run from an A100, evaluated on a laptop. The weights are fp32
// in the file, so nothing is lost by evaluating in fp32, while bf16 on a CPU without bf16 units
// can be 30x slower (Note [CPU precision]). So on the CPU they run in bf16 only where the
// checkpoint trained in bf16 (as recorded, or as its config says) and bf16 pays on this CPU
// (cpuInferenceInBf16, Note [CPU auto precision]), and in fp32 otherwise, unless --precision
// asks; on a GPU they keep the training config's train.precision (resolved for that card). The
// metrics of bf16 against fp32 on one checkpoint are in docs/operations.md.
// `asked`: the --precision value, "" when not given; `trained`: the checkpoint's trainer state;
// `width`: model.hidden, for the probe. The reason says what was chosen and, when it differs
// from how the checkpoint trained, why.
PrecisionChoice inferencePrecision(const std::string& asked, Precision configured,
                                   const TrainerState& trained, std::int64_t width,
                                   c10::Device device);

// CUDA builds: the name and compute capability (major, minor) of GPU `index`; nullopt on CPU
// builds or when the driver cannot say (PrecisionCuda.cpp).
struct CudaDeviceInfo {
  std::string name;
  int major = 0;
  int minor = 0;
};
std::optional<CudaDeviceInfo> cudaDeviceInfo(int index);

// TF32 matmuls and cuDNN autotuning for fixed shapes (CUDA only; no-ops on CPU).
void enableFastCudaMath();

}  // namespace mb::train
