// NCCL with a world of one (the DESIGN.md bootstrap over the control communicator, then
// ncclCommInitRank): every collective of the Communicator interface on CUDA tensors against the
// values expected from rank and size, the stream contract (a collective sees the kernels queued
// before it; work queued after wait() sees its result), the gradient reducer over NCCL, and
// teardown (Note [NCCL teardown] in src/dist/NcclCommunicator.cpp).
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "config/Config.h"
#include "dist/GradientReducer.h"
#include "tests/dist/TestModels.h"
#include "tests/gpu/GpuTest.h"

namespace mb {
namespace {

std::shared_ptr<dist::Communicator> makeNccl() {
  return test::gpuRuntime().makeDataCommunicator(BackendKind::kNccl, "cuda", test::gpu().index());
}

// One communicator for the suite, destroyed when the suite ends, inside RUN_ALL_TESTS: a static
// would be destroyed at exit, possibly after the CUDA runtime.
class GpuNccl : public ::testing::Test {
 public:
  static void TearDownTestSuite() {
    std::weak_ptr<dist::Communicator> watch = shared_;
    shared_.reset();
    EXPECT_TRUE(watch.expired())
        << "something still holds the suite's NCCL communicator: it would be destroyed at exit";
  }

 protected:
  static std::shared_ptr<dist::Communicator> nccl() {
    if (!shared_) shared_ = makeNccl();
    return shared_;
  }

 private:
  static std::shared_ptr<dist::Communicator> shared_;
};

std::shared_ptr<dist::Communicator> GpuNccl::shared_;

TEST_F(GpuNccl, AWorldOfOneGetsAnNcclCommunicator) {
  auto comm = nccl();
  EXPECT_EQ(comm->backendName(), "nccl");
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->rank(), 0);
}

TEST_F(GpuNccl, AllReduceOfEveryOpAndDtypeGivesTheExpectedValues) {
  auto comm = nccl();
  const int w = comm->size();
  const int rank = comm->rank();
  for (at::ScalarType type :
       {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong, at::kByte}) {
    for (std::int64_t n : {0, 1, 1001, 3'000'001}) {
      SCOPED_TRACE(std::string(c10::toString(type)) + " x " + std::to_string(n));
      // Small integers: exact in every dtype, summed over any world size used here.
      at::Tensor base = at::arange(n, at::kDouble).remainder(7);
      auto mine = [&] { return (base + rank).to(test::gpu(), type); };
      at::Tensor expectedSum = base * w + w * (w - 1) / 2.0;

      at::Tensor sum = mine();
      comm->allReduce(sum, dist::ReduceOp::kSum);
      EXPECT_EQ(sum.device(), test::gpu());
      EXPECT_TRUE(at::equal(sum.to(at::kCPU, at::kDouble), expectedSum)) << "sum";

      at::Tensor avg = mine();
      comm->allReduce(avg, dist::ReduceOp::kAvg);
      at::Tensor expectedAvg =
          at::isFloatingType(type) ? expectedSum / w : at::floor(expectedSum / w);
      EXPECT_TRUE(at::allclose(avg.to(at::kCPU, at::kDouble), expectedAvg, 1e-2, 1e-2)) << "avg";

      at::Tensor max = mine();
      comm->allReduce(max, dist::ReduceOp::kMax);
      EXPECT_TRUE(at::equal(max.to(at::kCPU, at::kDouble), base + (w - 1))) << "max";

      at::Tensor min = mine();
      comm->allReduce(min, dist::ReduceOp::kMin);
      EXPECT_TRUE(at::equal(min.to(at::kCPU, at::kDouble), base)) << "min";
    }
  }
}

TEST_F(GpuNccl, BroadcastAllGatherAndBarrier) {
  auto comm = nccl();
  const auto on = at::TensorOptions().device(test::gpu());
  for (int root = 0; root < comm->size(); ++root) {
    at::Tensor t = at::full({3, 5}, comm->rank() == root ? 100.0 + root : -1.0, on);
    comm->broadcast(t, root);
    EXPECT_TRUE(at::all(t.cpu() == 100.0 + root).item<bool>()) << "root " << root;
  }
  at::Tensor mine = at::full({2, 3}, comm->rank() * 10 + 4, on.dtype(at::kInt));
  at::Tensor all = comm->allGather(mine);
  ASSERT_EQ(all.sizes(), (at::IntArrayRef{comm->size(), 2, 3}));
  EXPECT_EQ(all.device(), test::gpu());
  for (int r = 0; r < comm->size(); ++r)
    EXPECT_TRUE(at::all(all[r].cpu() == r * 10 + 4).item<bool>()) << "rank " << r;
  EXPECT_NO_THROW(comm->barrier());
}

// Nothing synchronises the host between the kernels and the collectives: only the stream
// contract (event on the caller's stream, wait() makes the caller's stream wait) orders them.
TEST_F(GpuNccl, CollectivesAreOrderedWithTheCallersStream) {
  auto comm = nccl();
  const int w = comm->size();
  const auto on = at::TensorOptions().device(test::gpu());
  std::vector<at::Tensor> tensors;
  std::vector<std::shared_ptr<dist::Work>> works;
  for (int i = 0; i < 8; ++i) {
    at::Tensor t = at::zeros({1 << 20}, on);
    t.add_(static_cast<double>(i + 1));  // queued before the collective
    works.push_back(comm->allReduceAsync(t, dist::ReduceOp::kSum, "ordered " + std::to_string(i)));
    tensors.push_back(t);
  }
  for (int i = 7; i >= 0; --i) {
    works[i]->wait();
    tensors[i].mul_(2);  // queued after wait(): sees the reduced values
    float expected = 2.0f * static_cast<float>(w * (i + 1));
    EXPECT_TRUE(at::all(tensors[i].cpu() == expected).item<bool>()) << "tensor " << i;
  }
}

TEST_F(GpuNccl, ReducerOverNcclGivesThePlainGradients) {
  torch::manual_seed(3);
  test::MlpStack model(32, 4);
  model->to(test::gpu());
  at::Tensor x = at::randn({6, 32}, at::TensorOptions().device(test::gpu()));
  model->forward(x).pow(2).sum().backward();
  std::vector<at::Tensor> expected;
  for (auto& p : model->parameters()) {
    expected.push_back(p.grad().clone());
    p.mutable_grad().reset();
  }
  dist::ReducerOptions options;
  options.firstBucketMb = options.bucketMb = 5.0 / 1024;  // one layer per bucket
  dist::GradientReducer reducer(nccl(), model->parameters(), test::parameterNames(*model), options);
  ASSERT_GE(reducer.stats().buckets, 4);
  reducer.prepareForBackward(true);
  model->forward(x).pow(2).sum().backward();
  reducer.finishGradients();
  EXPECT_EQ(reducer.stats().launchedDuringBackward, reducer.stats().buckets);
  auto params = model->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    // W = 1: the sum over ranks is this rank's gradient (cuBLAS need not repeat its last bit).
    EXPECT_TRUE(at::allclose(params[i].grad(), expected[i], 1e-6, 1e-7)) << "parameter " << i;
  }
}

// A second communicator beside the suite's: destroying it (ncclCommDestroy) must leave the device
// and the other communicator working, and a new one must start.
TEST_F(GpuNccl, DestroyingACommunicatorLeavesTheOthersWorking) {
  const auto on = at::TensorOptions().device(test::gpu());
  for (int round = 0; round < 2; ++round) {
    auto extra = makeNccl();
    at::Tensor t = at::full({1000}, 3.0 + round, on);
    extra->allReduce(t, dist::ReduceOp::kSum);
    EXPECT_TRUE(at::all(t.cpu() == 3.0 + round).item<bool>()) << "round " << round;
    extra.reset();
  }
  at::Tensor t = at::full({10}, 7.0, on);
  nccl()->allReduce(t, dist::ReduceOp::kMax);
  EXPECT_TRUE(at::all(t.cpu() == 7.0).item<bool>());
}

// The watchdog's path: abort() ends the communicator (ncclCommAbort), later collectives refuse
// with an error, and the destructor then frees only the CUDA stream and events.
TEST_F(GpuNccl, AnAbortedCommunicatorRefusesWorkAndIsDestroyedQuietly) {
  auto extra = makeNccl();
  extra->abort();
  at::Tensor t = at::ones({4}, at::TensorOptions().device(test::gpu()));
  EXPECT_THROW(extra->allReduce(t, dist::ReduceOp::kSum), RuntimeError);
  extra.reset();
  nccl()->barrier();  // the device still works
}

}  // namespace
}  // namespace mb
