// MPI all-reduce bandwidth against message size, through megabatch's Communicator (the MPI
// backend: worker thread, in-place MPI_Allreduce; bf16 with the custom reduction operator).
// Run: mpirun -np 2 megabatch_bench_allreduce [--max-mib 64] [--seconds 0.3]
// Prints one line per (dtype, size): median time per all-reduce over repeated timed batches,
// algorithm bandwidth (bytes / time) and bus bandwidth (2 (W-1)/W * bytes / time, as nccl-tests).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include "common/Strings.h"
#include "dist/Runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double argOr(int argc, char** argv, const char* name, double fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atof(argv[i + 1]);
  return fallback;
}

// Seconds per all-reduce: the median of `rounds` batches of `iterations` calls.
double timeAllReduce(mb::dist::Communicator& comm, at::Tensor t, int iterations, int rounds) {
  std::vector<double> perCall;
  for (int r = 0; r < rounds; ++r) {
    comm.barrier("bench barrier");
    auto start = Clock::now();
    for (int i = 0; i < iterations; ++i)
      comm.allReduce(t, mb::dist::ReduceOp::kSum, "bench");
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    // The slowest rank defines the collective's time.
    at::Tensor slowest = at::full({1}, seconds, at::kDouble);
    comm.allReduce(slowest, mb::dist::ReduceOp::kMax, "bench time");
    perCall.push_back(slowest.item<double>() / iterations);
  }
  return median(perCall);
}

}  // namespace

int main(int argc, char** argv) {
  mb::dist::Runtime runtime(&argc, &argv);
  at::set_num_threads(1);
  auto& comm = runtime.control();
  double maxMib = argOr(argc, argv, "--max-mib", 64);
  double budget = argOr(argc, argv, "--seconds", 0.3);
  int w = comm.size();
  if (comm.rank() == 0) {
    std::printf("# all-reduce, %d ranks, MPI backend (megabatch Communicator)\n", w);
    std::printf("%-6s %12s %14s %14s %14s\n", "dtype", "size", "time/op (us)", "algbw (GB/s)",
                "busbw (GB/s)");
  }
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (double bytes = 4; bytes <= maxMib * 1024 * 1024; bytes *= 4) {
      auto numel = static_cast<std::int64_t>(bytes / at::elementSize(dtype));
      at::Tensor t = at::ones({numel}, dtype);
      // Calibrate so each timed batch takes about budget/5 seconds.
      double probe = timeAllReduce(comm, t, 3, 1);
      int iterations = std::max(1, static_cast<int>(budget / 5 / std::max(probe, 1e-7)));
      at::Tensor agreed = at::full({1}, iterations, at::kInt);
      comm.allReduce(agreed, mb::dist::ReduceOp::kMin, "bench iterations");
      double perCall = timeAllReduce(comm, t, agreed.item<int>(), 5);
      double algbw = bytes / perCall / 1e9;
      if (comm.rank() == 0)
        std::printf("%-6s %12s %14.1f %14.3f %14.3f\n", dtype == at::kFloat ? "fp32" : "bf16",
                    mb::str::humanBytes(bytes).c_str(), perCall * 1e6, algbw,
                    algbw * 2.0 * (w - 1) / w);
    }
  }
  return 0;
}
