#include "train/precision/DeviceProbe.h"

namespace mb::train {

std::string cudaVisibilityHint() {
  return "in a container, pass the GPUs through (docker run --gpus all, apptainer exec --nv, "
         "Kubernetes resources.limits nvidia.com/gpu); on a host, check that the NVIDIA driver "
         "is loaded (nvidia-smi) and CUDA_VISIBLE_DEVICES; or train on the CPU with "
         "train.device=cpu";
}

#if !MEGABATCH_WITH_CUDA
std::string cudaAbsenceReason() {
  return "this megabatch build has no CUDA (a CPU build; scripts/build-gpu.sh or "
         "scripts/build-cuda.sh build one with CUDA)";
}

std::string cudaBuildDescription() {
  return "";
}
#endif

}  // namespace mb::train
