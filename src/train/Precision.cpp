#include "train/Precision.h"

#include <ATen/Context.h>

namespace mb::train {

void enableFastCudaMath() {
  at::globalContext().setAllowTF32CuBLAS(true);
  at::globalContext().setAllowTF32CuDNN(true);
  at::globalContext().setBenchmarkCuDNN(true);
}

}  // namespace mb::train
