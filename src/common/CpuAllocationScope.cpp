#include "common/CpuAllocationScope.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include "common/Strings.h"
#include "common/TorchCompat.h"

namespace mb {
namespace {

struct Counters {
  std::atomic<std::int64_t> live{0};
  std::atomic<std::int64_t> peak{0};
  std::int64_t cap = 0;
  // Frees of storage from an earlier scope must not count against a later one.
  std::atomic<std::int64_t> generation{0};
  std::atomic<bool> active{false};
};

Counters& counters() {
  static Counters instance;
  return instance;
}

// What the counting allocator remembers of each of its allocations, keyed by the data pointer:
// a DataPtr's context must be its data pointer (Allocator::raw_allocate, used by TorchScript's
// ops, asserts it), so this cannot travel in the DataPtr itself.
struct Counted {
  c10::DataPtr inner;
  std::int64_t bytes;
  std::int64_t generation;  // -1: allocated outside any scope
};

struct CountedTable {
  std::mutex mutex;
  std::unordered_map<void*, Counted> byData;
};

CountedTable& countedTable() {
  static auto* table = new CountedTable();  // never destroyed: storages may outlive main()
  return *table;
}

void releaseCounted(void* data) {
  Counted counted;
  {
    CountedTable& table = countedTable();
    std::lock_guard<std::mutex> lock(table.mutex);
    auto it = table.byData.find(data);
    if (it == table.byData.end()) return;
    counted = std::move(it->second);
    table.byData.erase(it);
  }
  Counters& c = counters();
  if (counted.generation == c.generation.load() && c.active.load()) c.live -= counted.bytes;
  // counted.inner frees the allocation through its own deleter, outside the lock.
}

void raisePeak(Counters& c, std::int64_t live) {
  std::int64_t peak = c.peak.load();
  while (live > peak && !c.peak.compare_exchange_weak(peak, live)) {
  }
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::Allocator* inner() const { return inner_; }

  c10::DataPtr allocate(size_t n) MB_ALLOCATOR_CONST override {
    Counters& c = counters();
    const auto bytes = static_cast<std::int64_t>(n);
    std::int64_t generation = -1;
    if (c.active.load()) {
      const std::int64_t live = c.live.fetch_add(bytes) + bytes;
      if (c.cap > 0 && live > c.cap) {
        c.live -= bytes;
        throw AllocationCapExceeded(bytes, live - bytes, c.cap);
      }
      raisePeak(c, live);
      generation = c.generation.load();
    }
    c10::DataPtr inner = inner_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    if (data == nullptr) return inner;  // zero bytes: nothing to count or free
    {
      CountedTable& table = countedTable();
      std::lock_guard<std::mutex> lock(table.mutex);
      table.byData[data] = Counted{std::move(inner), bytes, generation};
    }
    return {data, data, &releaseCounted, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &releaseCounted; }

#if MB_TORCH_VERSION_AT_LEAST(2, 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

 private:
  c10::Allocator* inner_;
};

// One instance for the life of the process: storages allocated in a scope keep a pointer to it
// for their frees and resizes, which pass through uncounted once the scope has ended.
CountingCpuAllocator& countingAllocator() {
  static auto* instance = new CountingCpuAllocator(c10::GetCPUAllocator());
  return *instance;
}

// The highest priority, so that no registration made while a scope counts can take its place;
// the allocator LibTorch had comes back, at that priority, when the scope ends.
constexpr std::uint8_t kScopePriority = 255;

}  // namespace

AllocationCapExceeded::AllocationCapExceeded(std::int64_t requested, std::int64_t live,
                                             std::int64_t cap)
    : std::runtime_error("an allocation of " + str::humanBytes(static_cast<double>(requested)) +
                         " would pass the cap of " + str::humanBytes(static_cast<double>(cap)) +
                         " (" + str::humanBytes(static_cast<double>(live)) + " held)"),
      requested(requested),
      live(live),
      cap(cap) {}

CpuAllocationScope::CpuAllocationScope(std::int64_t capBytes) {
  Counters& c = counters();
  if (c.active.exchange(true))
    throw std::logic_error("CpuAllocationScope: only one scope may be active at a time");
  c.generation += 1;
  c.live = 0;
  c.peak = 0;
  c.cap = capBytes;
  c10::SetCPUAllocator(&countingAllocator(), kScopePriority);
}

CpuAllocationScope::~CpuAllocationScope() {
  c10::SetCPUAllocator(countingAllocator().inner(), kScopePriority);
  counters().active = false;
}

std::int64_t CpuAllocationScope::liveBytes() const {
  return counters().live.load();
}

std::int64_t CpuAllocationScope::peakBytes() const {
  return counters().peak.load();
}

}  // namespace mb
