// synchronizeParameters: rank 0's parameters and buffers reach every rank, and a model that
// differs between ranks (e.g. different configs on different nodes) is a ConfigError on every
// rank that names the differing rank and parameter. Models on test::device().
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "dist/GradientReducer.h"
#include "tests/dist/TestModels.h"
#include "tests/mpi/MpiTestMain.h"
#include "tests/support/Device.h"

namespace mb {
namespace {

// A model with a buffer as well as parameters.
struct WithBufferImpl : torch::nn::Module {
  explicit WithBufferImpl(std::int64_t hidden) {
    net = register_module("net", test::SeqNet(3, hidden, 2));
    scale = register_buffer("scale", at::randn({4}));
  }
  test::SeqNet net{nullptr};
  at::Tensor scale;
};
TORCH_MODULE(WithBuffer);

TEST(ParameterSync, EveryRankGetsRankZerosParametersAndBuffers) {
  auto comm = test::dataCommunicator();
  torch::manual_seed(500 + comm->rank());
  WithBuffer model(8);
  model->to(test::device());
  dist::synchronizeParameters(*comm, *model);
  for (const auto& item : model->named_parameters()) {
    at::Tensor all = comm->allGather(item.value().detach());  // [W, ...]
    for (int r = 1; r < comm->size(); ++r)
      EXPECT_TRUE(at::equal(all[r], all[0])) << item.key() << " on rank " << r;
  }
  at::Tensor scales = comm->allGather(model->scale);
  for (int r = 1; r < comm->size(); ++r)
    EXPECT_TRUE(at::equal(scales[r], scales[0]));
  // Rank 0 keeps its own weights.
  torch::manual_seed(500);
  WithBuffer rankZero(8);
  EXPECT_EQ(model->scale.device(), test::device());
  EXPECT_TRUE(at::equal(model->scale.cpu(), rankZero->scale));
}

void expectMismatchNamed(const std::function<void()>& body, int rank, const std::string& fragment) {
  try {
    body();
    FAIL() << "a model that differs between ranks must be an error";
  } catch (const Error& error) {
    std::string text = error.what();
    EXPECT_EQ(error.code(), ExitCode::kUsage) << text;
    EXPECT_TRUE(error.agreed());
    EXPECT_NE(text.find("rank " + std::to_string(rank)), std::string::npos) << text;
    EXPECT_NE(text.find(fragment), std::string::npos) << text;
    EXPECT_FALSE(error.hint().empty());
  }
}

TEST(ParameterSync, DifferentShapeOnOneRankIsNamedOnEveryRank) {
  auto comm = test::dataCommunicator();
  if (comm->size() == 1) GTEST_SKIP() << "needs two ranks";
  int odd = comm->size() - 1;
  WithBuffer model(comm->rank() == odd ? 9 : 8);  // e.g. a different model.hidden on one node
  model->to(test::device());
  expectMismatchNamed([&] { dist::synchronizeParameters(*comm, *model); }, odd,
                      "'net.lstm.weight_ih_l0' [36, 3]");
}

TEST(ParameterSync, ExtraParameterOnOneRankIsNamed) {
  auto comm = test::dataCommunicator();
  if (comm->size() == 1) GTEST_SKIP() << "needs two ranks";
  test::MlpStack model(4, comm->rank() == 1 ? 3 : 2);
  model->to(test::device());
  expectMismatchNamed([&] { dist::synchronizeParameters(*comm, *model); }, 1, "fc2.weight");
  // The communicator is still usable: every rank ran the same collectives.
  at::Tensor one = at::ones({1}, at::TensorOptions().device(test::device()));
  comm->allReduce(one, dist::ReduceOp::kSum);
  EXPECT_EQ(one.item<float>(), comm->size());
}

}  // namespace
}  // namespace mb
