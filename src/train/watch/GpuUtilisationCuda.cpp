// CUDA builds only (the CMake glob adds *Cuda.cpp files when CUDA is on): Note [GPU
// utilisation], reading NVML through dlopen so that nothing links against libnvidia-ml.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <string>
#include <vector>

#include "train/watch/GpuUtilisation.h"

namespace mb::train {
namespace {

// The few NVML declarations used here (nvml.h, stable ABI since CUDA 5).
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr int kGpuUtilizationSamples = 1;  // NVML_GPU_UTILIZATION_SAMPLES
union nvmlValue_t {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
};
struct nvmlSample_t {
  unsigned long long timeStamp;
  nvmlValue_t sampleValue;
};
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using ByPciFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using SamplesFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned long long, int*, unsigned int*,
                                   nvmlSample_t*);
using RatesFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);
using ErrorStringFn = const char* (*)(nvmlReturn_t);

class NvmlUtilisation final : public GpuUtilisation {
 public:
  NvmlUtilisation(void* library, nvmlDevice_t device)
      : library_(library),
        device_(device),
        samples_(reinterpret_cast<SamplesFn>(dlsym(library, "nvmlDeviceGetSamples"))),
        rates_(reinterpret_cast<RatesFn>(dlsym(library, "nvmlDeviceGetUtilizationRates"))) {}
  ~NvmlUtilisation() override {
    if (auto shutdown = reinterpret_cast<ShutdownFn>(dlsym(library_, "nvmlShutdown"))) shutdown();
    dlclose(library_);
  }

  std::optional<double> sinceLastCall() override {
    if (auto mean = meanOfSamples()) return mean;
    nvmlUtilization_t now{};
    if (rates_ != nullptr && rates_(device_, &now) == kNvmlSuccess)
      return static_cast<double>(now.gpu);
    return std::nullopt;
  }

 private:
  std::optional<double> meanOfSamples() {
    if (samples_ == nullptr) return std::nullopt;
    int type = 0;
    unsigned int count = 0;
    if (samples_(device_, kGpuUtilizationSamples, lastSeen_, &type, &count, nullptr) !=
            kNvmlSuccess ||
        count == 0)
      return std::nullopt;
    std::vector<nvmlSample_t> buffer(count);
    if (samples_(device_, kGpuUtilizationSamples, lastSeen_, &type, &count, buffer.data()) !=
        kNvmlSuccess)
      return std::nullopt;
    double sum = 0;
    unsigned int used = 0;
    for (unsigned int i = 0; i < count; ++i) {
      if (buffer[i].timeStamp <= lastSeen_) continue;
      sum += buffer[i].sampleValue.uiVal;  // utilisation samples are unsigned ints (percent)
      ++used;
    }
    for (unsigned int i = 0; i < count; ++i)
      lastSeen_ = std::max(lastSeen_, buffer[i].timeStamp);
    if (used == 0) return std::nullopt;
    return sum / used;
  }

  void* library_;
  nvmlDevice_t device_;
  SamplesFn samples_;
  RatesFn rates_;
  unsigned long long lastSeen_ = 0;  // microseconds, NVML's clock
};

std::string nvmlError(void* library, nvmlReturn_t status) {
  auto text = reinterpret_cast<ErrorStringFn>(dlsym(library, "nvmlErrorString"));
  return text != nullptr ? text(status) : "NVML error " + std::to_string(status);
}

}  // namespace

std::unique_ptr<GpuUtilisation> openNvmlUtilisation(int device, std::string& why) {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    why = std::string("cannot load libnvidia-ml.so.1 (the NVIDIA driver's NVML): ") + dlerror();
    return nullptr;
  }
  auto init = reinterpret_cast<InitFn>(dlsym(library, "nvmlInit_v2"));
  auto byPci = reinterpret_cast<ByPciFn>(dlsym(library, "nvmlDeviceGetHandleByPciBusId_v2"));
  if (init == nullptr || byPci == nullptr) {
    why = "libnvidia-ml.so.1 lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId_v2";
    dlclose(library);
    return nullptr;
  }
  nvmlReturn_t status = init();
  if (status != kNvmlSuccess) {
    why = "nvmlInit failed: " + nvmlError(library, status);
    dlclose(library);
    return nullptr;
  }
  char bus[64] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) != cudaSuccess) {
    cudaGetLastError();
    why = "cudaDeviceGetPCIBusId failed for device " + std::to_string(device);
    dlclose(library);
    return nullptr;
  }
  nvmlDevice_t handle = nullptr;
  status = byPci(bus, &handle);
  if (status != kNvmlSuccess) {
    why = std::string("NVML has no device at PCI bus ") + bus + ": " + nvmlError(library, status);
    dlclose(library);
    return nullptr;
  }
  return std::make_unique<NvmlUtilisation>(library, handle);
}

}  // namespace mb::train
