// buildModel: every kind by name, seeded initialisation identical across builds (ranks),
// independent of and invisible to the global random stream; the mlp model. The models that
// compute run on test::device() (Note [Test device]).
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "model/Model.h"
#include "tests/unit/ModelFixtures.h"

namespace mb::model {
namespace {

struct Kind {
  ModelConfig config;
  data::DataInfo info;
};

std::vector<Kind> kinds() {
  auto mlp = test::lstmConfig();
  mlp.kind = "mlp";
  auto series = test::seriesInfo({{"m1", 6, 3}, {"h1", 4, 2}});
  return {{test::gptConfig(16, 1, 2), test::tokenInfo(8, 30)},
          {test::lstmConfig(), series},
          {mlp, series}};
}

bool sameParameters(const Model& a, const Model& b) {
  auto pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    if (!at::equal(pa[i], pb[i])) return false;
  }
  return true;
}

TEST(ModelFactory, SameSeedSameWeightsWhateverRanBefore) {
  for (const auto& kind : kinds()) {
    at::manual_seed(1);
    auto a = test::deviceModel(kind.config, kind.info, 42);
    at::manual_seed(2);
    at::rand({100});
    auto b = test::deviceModel(kind.config, kind.info, 42);
    auto c = test::deviceModel(kind.config, kind.info, 43);
    EXPECT_EQ(a->kind(), b->kind());
    EXPECT_TRUE(sameParameters(*a, *b)) << a->kind();
    EXPECT_FALSE(sameParameters(*a, *c)) << a->kind();
  }
}

TEST(ModelFactory, LeavesTheGlobalRandomStreamAlone) {
  at::manual_seed(9);
  at::Tensor expected = at::rand({4});
  at::manual_seed(9);
  buildModel(kinds()[0].config, kinds()[0].info, 1);
  EXPECT_TRUE(at::equal(at::rand({4}), expected));
}

TEST(ModelFactory, MlpFlattensEveryInput) {
  auto info = test::seriesInfo({{"m1", 6, 3}, {"x", 0, 4}}, 2);
  auto config = test::lstmConfig();
  config.kind = "mlp";
  config.hidden = 10;
  config.layers = 3;
  auto model = test::deviceModel(config, info, 1);
  EXPECT_EQ(model->kind(), "mlp");
  auto params = model->named_parameters();
  EXPECT_EQ(params["body.0.weight"].sizes(), (at::IntArrayRef{10, 6 * 3 + 4}));
  EXPECT_TRUE(params.contains("body.6.weight"));
  EXPECT_EQ(params["head.weight"].sizes(), (at::IntArrayRef{2, 10}));
  auto batch = test::randomBatch(info, 5);
  at::Tensor out = model->forward(batch);
  EXPECT_EQ(out.sizes(), (at::IntArrayRef{5, 2}));
  EXPECT_EQ(model->termsPerSample(), 2);
  EXPECT_NEAR(model->lossSum(out, batch).item<double>(),
              (out - batch.targets).square().sum().item<double>(), 1e-5);

  config.task = Task::kClassification;
  auto labels = test::seriesInfo({{"x", 0, 4}}, 0, 3);
  auto classifier = test::deviceModel(config, labels, 1);
  auto labelled = test::randomBatch(labels, 6);
  at::Tensor logits = classifier->forward(labelled);
  EXPECT_EQ(logits.sizes(), (at::IntArrayRef{6, 3}));
  double accuracy = classifier->metricSums(logits, labelled)[0].second.item<double>();
  EXPECT_EQ(accuracy, logits.argmax(1).eq(labelled.targets).sum().item<double>());
}

TEST(ModelFactory, ClassesFromConfigMustCoverTheLabels) {
  auto config = test::lstmConfig();
  config.task = Task::kClassification;
  config.numClasses = 3;
  auto labels = test::seriesInfo({{"m1", 4, 2}}, 0, 5);
  EXPECT_THROW(buildModel(config, labels, 1), ConfigError);
  config.numClasses = 8;
  auto model = test::deviceModel(config, labels, 1);
  EXPECT_EQ(model->forward(test::randomBatch(labels, 2)).size(1), 8);
}

}  // namespace
}  // namespace mb::model
