#include "train/precision/Precision.h"

#include <ATen/Context.h>
#include <fmt/format.h>

#include "common/Error.h"
#include "config/ConfigSchema.h"
#include "train/precision/CpuAutoPrecision.h"

namespace mb::train {
namespace {

std::string capabilityText(const CudaDeviceInfo& gpu) {
  return gpu.name + ", compute capability " + std::to_string(gpu.major) + "." +
         std::to_string(gpu.minor);
}

PrecisionChoice chooseOnCuda(Precision requested, c10::Device device) {
  const std::optional<CudaDeviceInfo> gpu = cudaDeviceInfo(device.has_index() ? device.index() : 0);
  // Without the properties (an unusual driver), trust the user's choice; auto assumes a
  // current card.
  const bool bf16 = !gpu || gpu->major >= 8;
  const std::string card = gpu ? capabilityText(*gpu) : "compute capability unknown";
  switch (requested) {
    case Precision::kFp32:
      return {DType::kFp32, "train.precision = fp32"};
    case Precision::kFp16:
      return {DType::kFp16, "train.precision = fp16, with dynamic loss scaling"};
    case Precision::kBf16:
      if (!bf16)
        throw ConfigError("train.precision = bf16, but the GPU (" + card + ") has no BF16 support",
                          "use train.precision=fp16 (float16 with dynamic loss scaling, as "
                          "GradScaler), or train.precision=auto to pick what the card has");
      return {DType::kBf16, "train.precision = bf16"};
    case Precision::kAuto:
      break;
  }
  if (bf16) return {DType::kBf16, "train.precision = auto: bf16, the GPU (" + card + ") has BF16"};
  return {DType::kFp16, "train.precision = auto: fp16 with dynamic loss scaling, the GPU (" + card +
                            ") has no BF16 (compute capability < 8.0)"};
}

PrecisionChoice chooseOnCpu(Precision requested) {
  switch (requested) {
    case Precision::kFp32:
      return {DType::kFp32, "train.precision = fp32"};
    case Precision::kBf16:
      return {DType::kBf16, "train.precision = bf16 (CPU autocast)"};
    case Precision::kFp16:
      if (!compat::kCpuHalfAutocast)
        throw ConfigError(
            "train.precision = fp16 on the CPU needs LibTorch 2.2 or newer (this "
            "megabatch is built with LibTorch " +
                compat::torchVersion() + ", whose CPU autocast takes bf16 only)",
            "use train.precision=bf16 or fp32 on the CPU; fp16 is for GPUs without "
            "BF16 (T4, V100)");
      return {DType::kFp16, "train.precision = fp16 (CPU autocast), with dynamic loss scaling"};
    case Precision::kAuto:
      break;
  }
  // Until the trainer measures (Note [CPU auto precision]).
  return {DType::kFp32, "train.precision = auto: fp32 on the CPU until measured"};
}

Precision parsePrecisionFlag(const std::string& text) {
  for (Precision value : {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kAuto}) {
    if (toString(value) == text) return value;
  }
  throw ConfigError("--precision " + text + ": expected fp32, bf16, fp16 or auto",
                    "leave --precision out for fp32 on the CPU (the training precision on a GPU)");
}

}  // namespace

PrecisionChoice choosePrecision(Precision requested, c10::Device device) {
  return device.is_cuda() ? chooseOnCuda(requested, device) : chooseOnCpu(requested);
}

PrecisionChoice inferencePrecision(const std::string& asked, Precision configured,
                                   const TrainerState& trained, std::int64_t width,
                                   c10::Device device) {
  // --precision auto on the CPU is the default below (Note [CPU auto precision]).
  if (!asked.empty() && !(asked == "auto" && device.is_cpu())) {
    PrecisionChoice choice = choosePrecision(parsePrecisionFlag(asked), device);
    choice.reason = "--precision " + asked + ": " + toString(choice.dtype);
    return choice;
  }
  if (device.is_cuda()) return choosePrecision(configured, device);
  std::string whyNot;
  if (auto bf16 = cpuInferenceInBf16(trained, configured, width, whyNot)) return *bf16;
  PrecisionChoice choice{DType::kFp32, "fp32 on the CPU"};
  const std::optional<DType> recorded = precisionFromCode(trained.trainedPrecision);
  const std::string as = recorded ? toString(*recorded) : toString(configured);
  if (recorded ? *recorded != DType::kFp32
               : configured == Precision::kBf16 || configured == Precision::kFp16)
    choice.reason = fmt::format(
        "fp32 on the CPU, although the checkpoint trained in {}{}: its weights are fp32 in the "
        "file, so nothing is lost (--precision {} runs it as trained)",
        as, whyNot.empty() ? std::string(", which CPUs run slowly") : ", because " + whyNot, as);
  return choice;
}

#if !MEGABATCH_WITH_CUDA
std::optional<CudaDeviceInfo> cudaDeviceInfo(int /*index*/) {
  return std::nullopt;
}
#endif

void enableFastCudaMath() {
  compat::setTf32(true);
  at::globalContext().setBenchmarkCuDNN(true);
}

}  // namespace mb::train
