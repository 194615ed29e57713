#include "train/watch/GpuUtilisation.h"

namespace mb::train {

std::unique_ptr<GpuUtilisation> GpuUtilisation::open(c10::Device device, std::string& why) {
  if (!device.is_cuda()) return nullptr;
#if MEGABATCH_WITH_CUDA
  return openNvmlUtilisation(device.has_index() ? device.index() : 0, why);
#else
  why = "this megabatch build has no CUDA";
  return nullptr;
#endif
}

bool StarvationWatch::observe(double utilisation) {
  const bool judged = windows_++ > 0;
  const bool low = threshold_ > 0 && judged && utilisation < threshold_;
  lowWindows_ = low ? lowWindows_ + 1 : 0;
  return lowWindows_ >= 2 && (lowWindows_ - 2) % 20 == 0;
}

}  // namespace mb::train
