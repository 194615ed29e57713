#include "common/HostAllocator.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace mb {

void keepFreedHostMemory() {
#if defined(__GLIBC__)
  const bool userTuned = std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
                         std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
                         std::getenv("GLIBC_TUNABLES") != nullptr;
  if (userTuned) return;
  // Older glibc caps the mmap threshold at 32 MiB. Setting the trim threshold also turns off
  // the adaptive mmap threshold, so it is set only once an mmap threshold has been accepted.
  if (mallopt(M_MMAP_THRESHOLD, 256 << 20) == 1 || mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1)
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

void releaseFreedHostMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace mb
