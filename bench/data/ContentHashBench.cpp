// The speed of Note [Content hash] on one thread, next to the FNV-1a byte loop of Schema.cpp (the
// hash of the sampled-rows scheme before it): bytes per second of CPU time (the machine may be
// shared, so wall time says less) for rows of 16 B (a series of 4 float32 features), 96 B and
// 1 KiB, and bf16 rows (their NaN check included). Medians of 5.
//
//   cmake --build build --target megabatch_bench_content_hash
//   build/bench/megabatch_bench_content_hash [MiB]     (default 256)
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include "data/Schema.h"
#include "data/pipeline/ContentHash.h"

namespace {

double cpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

template <class F>
double medianSeconds(F work) {
  std::vector<double> seconds;
  for (int i = 0; i < 5; ++i) {
    const double start = cpuSeconds();
    work();
    seconds.push_back(cpuSeconds() - start);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[2];
}

volatile std::uint64_t sink = 0;  // keeps the hashes alive

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  const std::int64_t mib = argc > 1 ? std::atoll(argv[1]) : 256;
  const std::int64_t bytes = mib << 20;
  std::printf("content hash, one thread, %lld MiB per pass, GB per CPU second (median of 5)\n",
              static_cast<long long>(mib));
  for (std::int64_t width : {4, 24, 256}) {
    for (at::ScalarType type : {at::kFloat, at::kBFloat16}) {
      mb::data::HashedDataset d;
      d.path = "x";
      d.type = type;
      const std::int64_t rows = bytes / (width * static_cast<std::int64_t>(c10::elementSize(type)));
      d.dims = {rows, width};
      const at::Tensor values = at::randn({rows, width}).to(type);
      const double seconds =
          medianSeconds([&] { sink = sink + mb::data::hashUnits(d, 0, values); });
      std::printf("  rows of %4lld B %-8s (%lld rows a unit): %6.2f GB/s\n",
                  static_cast<long long>(d.rowBytes()), mb::data::heldTypeName(type).c_str(),
                  static_cast<long long>(d.unitRows()), static_cast<double>(bytes) / seconds / 1e9);
    }
  }
  const std::int64_t fnvBytes = std::min<std::int64_t>(bytes, std::int64_t{64} << 20);
  const at::Tensor raw = at::randint(0, 255, {fnvBytes}, at::kByte);
  const double seconds = medianSeconds([&] {
    sink = sink + mb::data::hashBytes(raw.data_ptr(), static_cast<std::size_t>(fnvBytes));
  });
  std::printf("  FNV-1a byte loop (Schema.cpp hashBytes):  %6.2f GB/s\n",
              static_cast<double>(fnvBytes) / seconds / 1e9);
  return 0;
}
