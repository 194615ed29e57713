// kind: gat's pieces that the Python references do not reach: the daily IC of a constant
// prediction (the cross-sectional mean baseline) is 0 and of a perfect one is 1; the graph cache
// builds a date once, forgets it per epoch when asked, and respects its budget; the batch graph
// is block-diagonal. On test::device() (Note [Test device]).
#include <gtest/gtest.h>

#include <ATen/Functions.h>

#include "model/parts/PanelGraph.h"
#include "model/parts/PanelObjective.h"
#include "tests/support/Device.h"

namespace mb::model {
namespace {

at::TensorOptions onDevice() {
  return at::TensorOptions().device(test::device());
}

TEST(Panel, DailyIcOfConstantAndPerfectPredictions) {
  at::manual_seed(3);
  at::Tensor target = at::randn({4, 10, 1}, onDevice());
  at::Tensor present = at::rand({4, 10}, onDevice()) < 0.8;
  present.narrow(1, 0, 2).fill_(true);
  at::Tensor constant = at::full({4, 10, 1}, 0.7, onDevice());  // a cross-sectional mean
  EXPECT_EQ(sumOfCrossSectionalCorrelations(constant, target, present).item<float>(), 0.0f);
  EXPECT_NEAR(sumOfCrossSectionalCorrelations(target, target, present).item<float>(), 4.0, 1e-5);
  EXPECT_NEAR(sumOfCrossSectionalCorrelations(-2 * target + 1, target, present).item<float>(), -4.0,
              1e-5);
  // Absent instruments do not count: changing their predictions changes nothing.
  at::Tensor noisy = at::where(present.unsqueeze(2), target, at::randn_like(target) * 100);
  EXPECT_NEAR(sumOfCrossSectionalCorrelations(noisy, target, present).item<float>(), 4.0, 1e-5);
  // Ranks: present instruments take 0..n-1 in order of value, absent ones come after.
  at::Tensor ranks = crossSectionalRanks(target, present).cpu();
  at::Tensor p = present.cpu();
  for (std::int64_t b = 0; b < 4; ++b) {
    const std::int64_t n = p[b].sum().item<std::int64_t>();
    at::Tensor taken = std::get<0>(ranks[b].masked_select(p[b].unsqueeze(1)).sort());
    EXPECT_TRUE(at::equal(taken, at::arange(n, at::kFloat))) << b;
    // Ascending: the smallest present value has rank 0, the largest n - 1.
    at::Tensor values = target.cpu()[b].masked_select(p[b].unsqueeze(1));
    at::Tensor ranked = ranks[b].masked_select(p[b].unsqueeze(1));
    EXPECT_EQ(ranked[values.argmin()].item<float>(), 0.0f) << b;
    EXPECT_EQ(ranked[values.argmax()].item<float>(), static_cast<float>(n - 1)) << b;
  }
}

struct GraphInputs {
  at::Tensor returns, present;
};

GraphInputs graphInputs(std::int64_t dates, std::int64_t nodes) {
  at::manual_seed(5);
  GraphInputs in;
  in.returns = at::randn({dates, nodes, 30}, onDevice());
  in.present = at::rand({dates, nodes}, onDevice()) < 0.9;
  in.present[0][3] = false;
  return in;
}

GraphConfig knn(std::int64_t k) {
  GraphConfig config;
  config.k = k;
  config.minPeriods = 10;
  return config;
}

TEST(Panel, BatchGraphIsBlockDiagonalOverDates) {
  GraphInputs in = graphInputs(3, 8);
  data::Batch batch;
  batch.hostSampleIndex = {11, 12, 13};
  PanelGraphCache cache(knn(3));
  at::Tensor edges = cache.batchEdges(batch, in.returns, in.present, at::Tensor()).cpu();
  std::vector<at::Tensor> alone =
      buildPanelGraphs(in.returns, in.present, at::Tensor(), knn(3));  // [2, E_d] each
  std::int64_t offset = 0;
  for (std::int64_t b = 0; b < 3; ++b) {
    const std::int64_t count = alone[b].size(1);
    EXPECT_TRUE(at::equal(edges.narrow(1, offset, count), alone[b].cpu() + b * 8)) << b;
    offset += count;
  }
  EXPECT_EQ(offset, edges.size(1));
  // Absent instrument 3 of date 0 (node 3) is in no edge.
  EXPECT_EQ(edges.eq(3).sum().item<std::int64_t>(), 0);
}

TEST(Panel, CacheBuildsEachDateOnceOrOncePerEpoch) {
  GraphInputs in = graphInputs(4, 8);
  data::Batch batch;
  batch.hostSampleIndex = {1, 2, 3, 4};
  PanelGraphCache once(knn(3));
  at::Tensor first = once.batchEdges(batch, in.returns, in.present, at::Tensor());
  EXPECT_EQ(once.stats().built, 4);
  EXPECT_EQ(once.stats().cached, 4);
  once.startEpoch();
  // The cache answers from the date alone: returns it would build from are not needed.
  at::Tensor again = once.batchEdges(batch, at::Tensor(), in.present, at::Tensor());
  EXPECT_TRUE(at::equal(first, again));
  EXPECT_EQ(once.stats().built, 4);
  EXPECT_EQ(once.stats().builtThisEpoch, 0);
  EXPECT_EQ(once.stats().hits, 4);

  GraphConfig config = knn(3);
  config.rebuild = GraphRebuild::kPerEpoch;
  PanelGraphCache perEpoch(config);
  perEpoch.batchEdges(batch, in.returns, in.present, at::Tensor());
  perEpoch.startEpoch();
  EXPECT_EQ(perEpoch.stats().cached, 0);
  perEpoch.batchEdges(batch, in.returns, in.present, at::Tensor());
  EXPECT_EQ(perEpoch.stats().built, 8);

  config = knn(3);
  config.cacheMb = 1e-4;  // 104 bytes: not one date's graph
  PanelGraphCache tiny(config);
  at::Tensor built = tiny.batchEdges(batch, in.returns, in.present, at::Tensor());
  EXPECT_TRUE(at::equal(built, first));
  EXPECT_EQ(tiny.stats().cached, 0);
  EXPECT_EQ(tiny.stats().uncachedBuilds, 4);
}

}  // namespace
}  // namespace mb::model
