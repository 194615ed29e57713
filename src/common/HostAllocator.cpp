#include "common/HostAllocator.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace mb {

namespace {

bool userTunedMalloc() {
  return std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
         std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
         std::getenv("GLIBC_TUNABLES") != nullptr;
}

bool keeping = false;  // keepFreedHostMemory() took effect

}  // namespace

void keepFreedHostMemory() {
#if defined(__GLIBC__)
  if (userTunedMalloc()) return;
  // Older glibc caps the mmap threshold at 32 MiB. Setting the trim threshold also turns off
  // the adaptive mmap threshold, so it is set only once an mmap threshold has been accepted.
  if (mallopt(M_MMAP_THRESHOLD, 256 << 20) == 1 || mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1) {
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(kKeptHostHeapBytes));
    keeping = true;
  }
#endif
}

ReturnFreedHostMemory::ReturnFreedHostMemory() {
#if defined(__GLIBC__)
  if (!userTunedMalloc()) {
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 20);
    changed_ = true;
  }
  malloc_trim(0);
#endif
}

ReturnFreedHostMemory::~ReturnFreedHostMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
  if (changed_ && keeping)
    keepFreedHostMemory();
  else if (changed_) {
    mallopt(M_MMAP_THRESHOLD, 128 << 10);  // glibc's defaults
    mallopt(M_TRIM_THRESHOLD, 128 << 10);
  }
#endif
}

void releaseFreedHostMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace mb
