#include "train/Precision.h"

#include <ATen/Context.h>

namespace mb::train {

void enableFastCudaMath() {
  compat::setTf32(true);
  at::globalContext().setBenchmarkCuDNN(true);
}

}  // namespace mb::train
