#include "train/GpuUtilisation.h"

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

}  // namespace mb::train
