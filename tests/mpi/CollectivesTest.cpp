// Collectives of every backend, with expected values computed from rank and size
// (flashlight's AllReduceTest style), for several dtypes and sizes 0, 1, odd, and large. The
// control communicator carries host tensors by design; the data communicator carries tensors on
// test::device() (under cuda: the MPI backend staging them through host memory).
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "tests/mpi/MpiTestMain.h"
#include "tests/support/Device.h"

namespace mb {
namespace {

struct Case {
  at::ScalarType dtype;
  int64_t numel;
};

class CollectiveCases : public ::testing::TestWithParam<Case> {};

// The gradient communicator (its own MPI communicator and worker when MPI_THREAD_MULTIPLE;
// the single-process backend in a world of one) must give the same results as the control one.
dist::Communicator& dataComm() {
  return *test::dataCommunicator();
}

// Values small enough to be exact in bf16 after summing over 4 ranks, on `device`.
at::Tensor rankPattern(int rank, const Case& c, c10::Device device) {
  return (at::arange(c.numel, at::kDouble).remainder(7) + rank).to(device, c.dtype);
}

// Larger than a default 25 MiB gradient bucket: only summed (the gradient path), so the suite
// stays fast on two shared cores; the other operators are checked on the smaller sizes.
constexpr int64_t kLarge = 1'000'000;

// Reduces tensors on `device` and compares on the CPU; the result stays on `device`.
void checkAllReduce(dist::Communicator& comm, const Case& c, c10::Device device) {
  int w = comm.size();
  at::Tensor base = at::arange(c.numel, at::kDouble).remainder(7);
  // sum over r of (base + r) = w*base + w(w-1)/2
  at::Tensor expectedSum = base * w + w * (w - 1) / 2.0;

  at::Tensor sum = rankPattern(comm.rank(), c, device);
  comm.allReduce(sum, dist::ReduceOp::kSum);
  EXPECT_EQ(sum.device(), device);
  EXPECT_TRUE(at::allclose(sum.to(at::kCPU, at::kDouble), expectedSum)) << "sum, dtype " << c.dtype;
  if (c.numel > kLarge) return;

  at::Tensor avg = rankPattern(comm.rank(), c, device);
  comm.allReduce(avg, dist::ReduceOp::kAvg);
  double tolerance = c.dtype == at::kBFloat16 ? 1e-2 : 1e-6;
  // Integer averages round down (floor division), floating ones are exact up to the dtype.
  at::Tensor expectedAvg =
      at::isFloatingType(c.dtype) ? expectedSum / w : at::floor(expectedSum / w);
  EXPECT_TRUE(at::allclose(avg.to(at::kCPU, at::kDouble), expectedAvg, tolerance, tolerance))
      << "avg";

  at::Tensor max = rankPattern(comm.rank(), c, device);
  comm.allReduce(max, dist::ReduceOp::kMax);
  EXPECT_TRUE(at::allclose(max.to(at::kCPU, at::kDouble), base + (w - 1))) << "max";

  at::Tensor min = rankPattern(comm.rank(), c, device);
  comm.allReduce(min, dist::ReduceOp::kMin);
  EXPECT_TRUE(at::allclose(min.to(at::kCPU, at::kDouble), base)) << "min";
}

TEST_P(CollectiveCases, AllReduceSumAvgMaxMin) {
  checkAllReduce(test::runtime().control(), GetParam(), c10::Device(c10::kCPU));
}

TEST_P(CollectiveCases, DataCommunicatorAgrees) {
  if (GetParam().numel > kLarge) GTEST_SKIP() << "large sizes: covered on the control communicator";
  checkAllReduce(dataComm(), GetParam(), test::device());
}

INSTANTIATE_TEST_SUITE_P(
    Collectives, CollectiveCases,
    // Sizes 0, 1, odd, and larger than a default 25 MiB bucket (28, 26.4, 26.4 MB).
    ::testing::Values(Case{at::kFloat, 0}, Case{at::kFloat, 1}, Case{at::kFloat, 1001},
                      Case{at::kFloat, 7'000'001}, Case{at::kDouble, 0}, Case{at::kDouble, 1},
                      Case{at::kDouble, 333}, Case{at::kDouble, 3'300'001}, Case{at::kBFloat16, 0},
                      Case{at::kBFloat16, 1}, Case{at::kBFloat16, 17},
                      Case{at::kBFloat16, 13'200'001}, Case{at::kHalf, 257}, Case{at::kLong, 5}));

TEST(Collectives, BroadcastFromEveryRoot) {
  auto& comm = test::runtime().control();
  for (int root = 0; root < comm.size(); ++root) {
    at::Tensor t = at::full({3, 5}, comm.rank() == root ? 100.0 + root : -1.0, at::kFloat);
    comm.broadcast(t, root);
    EXPECT_TRUE(at::all(t == 100.0 + root).item<bool>()) << "root " << root;
  }
}

TEST(Collectives, AllGatherStacksRanks) {
  auto& comm = test::runtime().control();
  at::Tensor mine = at::full({2, 3}, comm.rank() * 10, at::kInt);
  at::Tensor all = comm.allGather(mine);
  ASSERT_EQ(all.sizes(), (at::IntArrayRef{comm.size(), 2, 3}));
  for (int r = 0; r < comm.size(); ++r)
    EXPECT_TRUE(at::all(all[r] == r * 10).item<bool>());
}

// Broadcast and all-gather on the data communicator, with tensors on test::device(): the
// results come back on that device (the MPI backend stages CUDA tensors through the host).
TEST(Collectives, DataCommunicatorBroadcastsAndGathersOnTheDevice) {
  auto& comm = dataComm();
  const auto on = at::TensorOptions().device(test::device());
  for (int root = 0; root < comm.size(); ++root) {
    at::Tensor t = at::full({3, 5}, comm.rank() == root ? 100.0 + root : -1.0, on);
    comm.broadcast(t, root);
    EXPECT_EQ(t.device(), test::device());
    EXPECT_TRUE(at::all(t.cpu() == 100.0 + root).item<bool>()) << "root " << root;
  }
  at::Tensor mine = at::full({2, 3}, comm.rank() * 10, on.dtype(at::kInt));
  at::Tensor all = comm.allGather(mine);
  ASSERT_EQ(all.sizes(), (at::IntArrayRef{comm.size(), 2, 3}));
  EXPECT_EQ(all.device(), test::device());
  for (int r = 0; r < comm.size(); ++r)
    EXPECT_TRUE(at::all(all[r].cpu() == r * 10).item<bool>());
}

TEST(Collectives, AsyncAllReducesCompleteInOrder) {
  auto& comm = test::runtime().control();
  std::vector<at::Tensor> tensors;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int i = 0; i < 8; ++i) {
    tensors.push_back(at::full({100 + i}, static_cast<float>(comm.rank() + i), at::kFloat));
    works.push_back(
        comm.allReduceAsync(tensors.back(), dist::ReduceOp::kSum, "async " + std::to_string(i)));
  }
  int w = comm.size();
  for (int i = 7; i >= 0; --i) {
    works[i]->wait();
    float expected = w * i + w * (w - 1) / 2.0f;
    EXPECT_TRUE(at::all(tensors[i] == expected).item<bool>()) << "tensor " << i;
  }
}

}  // namespace
}  // namespace mb
