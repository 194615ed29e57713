#pragma once
// GPU utilisation from NVML, for the trainer's log lines and its starvation warning.
//
// Note [GPU utilisation]
// NVML's "GPU utilisation" is the share of time in which at least one kernel ran on the GPU,
// sampled by the driver several times a second. At each log line the trainer asks for the mean
// of the samples taken since the previous one (nvmlDeviceGetSamples; the instantaneous
// nvmlDeviceGetUtilizationRates when samples are unavailable) of rank 0's GPU, found by its PCI
// bus id so CUDA_VISIBLE_DEVICES is respected. NVML is loaded at run time (dlopen of
// libnvidia-ml.so.1, which the NVIDIA driver installs), so the binary neither links nor needs it;
// without it the utilisation is absent, with one line in the log saying why. CPU runs have no
// utilisation at all: nothing is reported, nothing is estimated.
#include <memory>
#include <optional>
#include <string>

#include <c10/core/Device.h>

namespace mb::train {

class GpuUtilisation {
 public:
  virtual ~GpuUtilisation() = default;
  // Mean utilisation in percent since the previous call (or since opening); nullopt when NVML
  // had no sample.
  virtual std::optional<double> sinceLastCall() = 0;

  // nullptr for CPU devices and CPU builds; on CUDA, nullptr with `why` set when NVML cannot be
  // used.
  static std::unique_ptr<GpuUtilisation> open(c10::Device device, std::string& why);
};

// The NVML reader for CUDA device `device`; GpuUtilisationCuda.cpp (CUDA builds only).
std::unique_ptr<GpuUtilisation> openNvmlUtilisation(int device, std::string& why);

}  // namespace mb::train
