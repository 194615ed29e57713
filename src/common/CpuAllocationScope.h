#pragma once
// Counting, and capping, the CPU memory LibTorch allocates in one phase of a run.
//
// Note [Counting CPU allocations]
// Every CPU tensor's storage comes from c10's CPU allocator. While a CpuAllocationScope is
// alive, that allocator is replaced by one that passes each request on and counts the bytes
// the scope allocated and has not freed yet (live) and the most it ever held at once (peak).
// It is what a CUDA caching allocator's statistics give on a GPU, for the CPU: the memory plan
// measures a trial step with it, and a model built from a checkpoint's config gets a cap, so
// that a config edited to describe a huge model is refused before it fills memory (exit 4)
// instead of after. Outside a scope LibTorch's own allocator serves every request. Storage
// allocated in a scope keeps working after it (a storage remembers its allocator, so the
// counting one lives as long as the process and passes through uncounted once the scope has
// ended). One scope at a time, process-wide.
#include <cstdint>
#include <stdexcept>

namespace mb {

// An allocation that would take a scope's live bytes past its cap.
class AllocationCapExceeded : public std::runtime_error {
 public:
  AllocationCapExceeded(std::int64_t requested, std::int64_t live, std::int64_t cap);
  std::int64_t requested;
  std::int64_t live;
  std::int64_t cap;
};

class CpuAllocationScope {
 public:
  // capBytes <= 0: count only.
  explicit CpuAllocationScope(std::int64_t capBytes = 0);
  ~CpuAllocationScope();
  CpuAllocationScope(const CpuAllocationScope&) = delete;
  CpuAllocationScope& operator=(const CpuAllocationScope&) = delete;

  std::int64_t liveBytes() const;
  std::int64_t peakBytes() const;
};

}  // namespace mb
