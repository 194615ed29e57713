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
#include <cstdint>
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

// When the trainer warns that the GPU starves: `observe` takes each log window's utilisation
// (rank 0 on CUDA) and says whether the warning is due. The first window, with its warm-up, is
// not judged; the warning is due when the utilisation has stayed under the threshold (percent;
// 0 = never warn) for two judged windows in a row, and then every 20th such window.
class StarvationWatch {
 public:
  explicit StarvationWatch(double threshold) : threshold_(threshold) {}
  bool observe(double utilisation);
  // Consecutive judged windows under the threshold, the current one included.
  std::int64_t lowWindows() const { return lowWindows_; }

 private:
  double threshold_;
  std::int64_t windows_ = 0;
  std::int64_t lowWindows_ = 0;
};

// The NVML reader for CUDA device `device`; GpuUtilisationCuda.cpp (CUDA builds only).
std::unique_ptr<GpuUtilisation> openNvmlUtilisation(int device, std::string& why);

}  // namespace mb::train
