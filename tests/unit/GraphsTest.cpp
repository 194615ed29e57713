// The graphs layout (data/layouts/GraphsLayout.h) in one process: batches gathered on the device
// against the file's rows, stratified splits (Note [Graph splits]), ranks balanced by node count
// (Note [Weighted shards]), the split metrics of classification (model/parts/ClassMetrics.h), and
// the JSON reader of the converter (data/tools/Json.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "data/ShardedData.h"
#include "data/layouts/GraphsLayout.h"
#include "data/pipeline/GlobalOrder.h"
#include "data/tools/Json.h"
#include "dist/SingleCommunicator.h"
#include "model/parts/ClassMetrics.h"
#include "tests/data/DataFiles.h"
#include "tests/data/GraphFiles.h"
#include "tests/support/Device.h"

namespace mb {
namespace {

using data::Split;

at::Tensor readGraphsDataset(const std::string& path, const std::string& dataset,
                             at::ScalarType type) {
  h5::Handle file = h5::openFile(path, false, ExitCode::kData);
  return h5::readTensor(file.get(), dataset, ExitCode::kData, type);
}

std::unique_ptr<data::ShardedData> loadGraphs(Config config) {
  config.data.residency = Residency::kAuto;  // device residency on a GPU, host on the CPU
  dist::SingleCommunicator comm;
  return data::ShardedData::load(config, comm, test::device());
}

// The batch of graphs `graphs` (file numbers) built from the file's datasets, one graph at a
// time: the reference the device gather must equal.
struct Expected {
  at::Tensor nodeFeatures, nodeTypes, edgeIndex, edgeFeatures, nodeGraph, targets;
};

Expected reference(const std::string& path, const std::vector<std::int64_t>& graphs) {
  at::Tensor nodeOffsets = readGraphsDataset(path, "node_offsets", at::kLong);
  at::Tensor edgeOffsets = readGraphsDataset(path, "edge_offsets", at::kLong);
  at::Tensor features = readGraphsDataset(path, "node_features", at::kFloat);
  at::Tensor types = readGraphsDataset(path, "node_type", at::kLong);
  at::Tensor edges = readGraphsDataset(path, "edge_index", at::kLong);
  at::Tensor edgeFeatures = readGraphsDataset(path, "edge_features", at::kFloat);
  at::Tensor labels = readGraphsDataset(path, "label", at::kLong);
  std::vector<at::Tensor> x, t, e, ef, owner, y;
  std::int64_t base = 0;
  for (std::size_t i = 0; i < graphs.size(); ++i) {
    std::int64_t g = graphs[i];
    std::int64_t n0 = nodeOffsets[g].item<std::int64_t>(),
                 n1 = nodeOffsets[g + 1].item<std::int64_t>();
    std::int64_t e0 = edgeOffsets[g].item<std::int64_t>(),
                 e1 = edgeOffsets[g + 1].item<std::int64_t>();
    x.push_back(features.slice(0, n0, n1));
    t.push_back(types.slice(0, n0, n1));
    e.push_back(edges.slice(1, e0, e1) + base);
    ef.push_back(edgeFeatures.slice(0, e0, e1));
    owner.push_back(at::full({n1 - n0}, static_cast<std::int64_t>(i), at::kLong));
    y.push_back(labels[g].reshape({1}));
    base += n1 - n0;
  }
  return {at::cat(x), at::cat(t), at::cat(e, 1), at::cat(ef), at::cat(owner), at::cat(y)};
}

void expectBatch(const std::string& path, const data::Batch& gathered) {
  ASSERT_EQ(gathered.edgeIndex.device(), test::device());
  auto cpu = [](const at::Tensor& t) { return t.cpu(); };
  at::Tensor index = cpu(gathered.sampleIndex);
  std::vector<std::int64_t> graphs(index.data_ptr<std::int64_t>(),
                                   index.data_ptr<std::int64_t>() + index.numel());
  Expected want = reference(path, graphs);
  EXPECT_TRUE(at::equal(cpu(gathered.nodeFeatures), want.nodeFeatures));
  EXPECT_TRUE(at::equal(cpu(gathered.nodeTypes), want.nodeTypes));
  EXPECT_TRUE(at::equal(cpu(gathered.edgeIndex), want.edgeIndex));
  EXPECT_TRUE(at::equal(cpu(gathered.edgeFeatures), want.edgeFeatures));
  EXPECT_TRUE(at::equal(cpu(gathered.nodeGraph), want.nodeGraph));
  EXPECT_TRUE(at::equal(cpu(gathered.targets), want.targets));
}

class GraphsLayout : public ::testing::Test {
 protected:
  test::TempDir dir_;
};

TEST_F(GraphsLayout, TrainBatchesAreTheFileGraphsShiftedIntoOneGraph) {
  std::string path = dir_.file("g.h5");
  test::writeGraphsFile(path, {});
  auto data = loadGraphs(test::graphsConfig(path));
  ASSERT_EQ(data->info().layout, "graphs");
  data->beginEpoch(0);
  std::set<std::int64_t> seen;
  for (std::int64_t b = 0; b < data->batchesPerEpoch(); ++b) {
    data::Batch batch = data->trainBatch(b, 0, data->localCount(b), at::kFloat);
    expectBatch(path, batch);
    at::Tensor index = batch.sampleIndex.cpu();
    for (std::int64_t i = 0; i < index.numel(); ++i)
      EXPECT_TRUE(seen.insert(index[i].item<std::int64_t>()).second) << "graph twice in an epoch";
  }
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), data->info().split(Split::kTrain).size());
  // A batch taken in two micro-batches: each is a graph of its own, ids from 0.
  data::Batch part = data->trainBatch(1, 3, data->localCount(1), at::kFloat);
  expectBatch(path, part);
}

TEST_F(GraphsLayout, SplitsAreStratifiedByLabelAndDisjoint) {
  std::string path = dir_.file("g.h5");
  test::writeGraphsFile(path, {});  // 60 graphs, labels sorted: 20 per class
  auto data = loadGraphs(test::graphsConfig(path));
  at::Tensor labels = readGraphsDataset(path, "label", at::kLong);
  std::set<std::int64_t> all;
  std::map<Split, std::vector<std::int64_t>> perClass;
  for (Split split : {Split::kTrain, Split::kVal, Split::kTest}) {
    std::int64_t count = data->evalCount(split);
    data::Batch batch = data->evalBatch(split, 0, count, at::kFloat);
    expectBatch(path, batch);
    at::Tensor index = batch.sampleIndex.cpu();
    perClass[split].assign(3, 0);
    for (std::int64_t i = 0; i < count; ++i) {
      std::int64_t g = index[i].item<std::int64_t>();
      EXPECT_TRUE(all.insert(g).second) << "graph " << g << " in two splits";
      perClass[split][labels[g].item<std::int64_t>()] += 1;
    }
  }
  EXPECT_EQ(all.size(), 60u);
  // 0.8 / 0.1 / 0.1 of 20 graphs per class: 16 / 2 / 2 each. Time order would put class 2 in
  // val and test only.
  EXPECT_EQ(perClass[Split::kTrain], (std::vector<std::int64_t>{16, 16, 16}));
  EXPECT_EQ(perClass[Split::kVal], (std::vector<std::int64_t>{2, 2, 2}));
  EXPECT_EQ(perClass[Split::kTest], (std::vector<std::int64_t>{2, 2, 2}));
}

TEST_F(GraphsLayout, StratifiedViewKeepsEveryClassInProportion) {
  std::vector<std::int64_t> labels;
  for (std::int64_t g = 0; g < 1000; ++g)
    labels.push_back(g < 700 ? 0 : (g < 950 ? 1 : 2));  // 700 / 250 / 50
  std::vector<std::int64_t> view = data::GraphsLayout::stratifiedView(labels, {800, 900, 1000});
  std::vector<std::int64_t> sorted = view;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t g = 0; g < 1000; ++g)
    ASSERT_EQ(sorted[g], g) << "the view is a permutation";
  const std::int64_t bounds[] = {0, 800, 900, 1000};
  const double shares[] = {0.8, 0.1, 0.1};
  const std::int64_t sizes[] = {700, 250, 50};
  for (int block = 0; block < 3; ++block) {
    std::vector<std::int64_t> counts(3, 0);
    for (std::int64_t p = bounds[block]; p < bounds[block + 1]; ++p) {
      if (p > bounds[block]) {
        EXPECT_LT(view[p - 1], view[p]) << "file order within a split";
      }
      counts[labels[view[p]]] += 1;
    }
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(static_cast<double>(counts[c]), shares[block] * static_cast<double>(sizes[c]),
                  1.0)
          << "block " << block << " class " << c;
  }
}

TEST_F(GraphsLayout, RegressionLabelsKeepTheFileOrder) {
  std::string path = dir_.file("g.h5");
  test::writeGraphsFile(path, {});
  Config config = test::graphsConfig(path);
  config.model.task = Task::kRegression;  // integer labels read as numbers
  auto data = loadGraphs(config);
  data::Batch val = data->evalBatch(Split::kVal, 0, data->evalCount(Split::kVal), at::kFloat);
  EXPECT_EQ(val.sampleIndex.cpu()[0].item<std::int64_t>(), 48);  // the 49th graph: time order
}

TEST_F(GraphsLayout, StreamResidencyIsRefusedWithTheReason) {
  std::string path = dir_.file("g.h5");
  test::writeGraphsFile(path, {});
  Config config = test::graphsConfig(path);
  config.data.residency = Residency::kStream;
  auto problem = data::layoutKind("graphs").checkConfig(config);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("data.residency = stream"), std::string::npos) << *problem;
}

// --- Note [Weighted shards] -------------------------------------------------------------

constexpr std::int64_t kItems = 1000;
constexpr std::int64_t kShards = 8;
constexpr std::int64_t kBatch = 32;

// Costs sorted ascending, as in a file of graphs sorted by size: 2 .. 41 nodes.
std::vector<std::int64_t> sortedCosts() {
  std::vector<std::int64_t> costs;
  for (std::int64_t i = 0; i < kItems; ++i)
    costs.push_back(2 + i * 40 / kItems);
  return costs;
}

// Mean over batches of |cost(rank 0) - cost(rank 1)| / cost(batch) with two ranks.
double rankImbalance(const data::GlobalOrder& order, const std::vector<std::int64_t>& costs) {
  double total = 0;
  for (std::int64_t b = 0; b < order.batchesPerEpoch() - 1; ++b) {  // the last may be short
    double perRank[2] = {0, 0};
    for (int r = 0; r < 2; ++r) {
      data::GlobalOrder::Share share =
          order.epochShare(0, data::GlobalOrder::shardsOfRank(kShards, r, 2));
      for (std::int64_t k = share.offsets[b]; k < share.offsets[b + 1]; ++k)
        perRank[r] += static_cast<double>(costs[share.items[k]]);
    }
    total += std::fabs(perRank[0] - perRank[1]) / (perRank[0] + perRank[1]);
  }
  return total / static_cast<double>(order.batchesPerEpoch() - 1);
}

TEST(GraphsWeightedOrder, RanksDoTheSameWorkPerStep) {
  std::vector<std::int64_t> costs = sortedCosts();
  data::GlobalOrder byCount(kItems, kShards, 7, kBatch, true);
  data::GlobalOrder byCost(kItems, kShards, 7, kBatch, true, 0, {}, costs);
  double unweighted = rankImbalance(byCount, costs);
  double weighted = rankImbalance(byCost, costs);
  std::printf("nodes per step, |rank 0 - rank 1| / both: equal-count shards %.3f, weighted %.3f\n",
              unweighted, weighted);
  EXPECT_GT(unweighted, 0.3);  // rank 1 holds the large graphs: about 0.45
  EXPECT_LT(weighted, 0.12) << "unweighted " << unweighted;
}

TEST(GraphsWeightedOrder, ShardsHoldEqualCost) {
  std::vector<std::int64_t> costs = sortedCosts();
  data::GlobalOrder order(kItems, kShards, 7, kBatch, true, 0, {}, costs);
  const double total = std::accumulate(costs.begin(), costs.end(), 0.0);
  for (std::int64_t s = 0; s < kShards; ++s) {
    data::ItemRange items = order.shardItems(s);
    double cost = std::accumulate(costs.begin() + items.begin, costs.begin() + items.end, 0.0);
    EXPECT_NEAR(cost, total / kShards, 41.0) << "shard " << s;  // within one item
  }
}

TEST(GraphsWeightedOrder, RankSharesMergeIntoTheSingleRankBatchesAndCoverTheEpoch) {
  std::vector<std::int64_t> costs = sortedCosts();
  data::GlobalOrder order(kItems, kShards, 7, kBatch, true, 0, {}, costs);
  for (int world : {1, 2, 3, 8}) {
    std::vector<data::GlobalOrder::Share> shares;
    for (int r = 0; r < world; ++r)
      shares.push_back(order.epochShare(1, data::GlobalOrder::shardsOfRank(kShards, r, world)));
    std::set<std::int64_t> seen;
    for (std::int64_t b = 0; b < order.batchesPerEpoch(); ++b) {
      std::vector<std::int64_t> full = order.batchItems(1, b);
      std::multiset<std::int64_t> merged;
      for (const auto& share : shares)
        merged.insert(share.items.begin() + share.offsets[b],
                      share.items.begin() + share.offsets[b + 1]);
      EXPECT_EQ(merged, std::multiset<std::int64_t>(full.begin(), full.end())) << "W=" << world;
      seen.insert(full.begin(), full.end());
    }
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), kItems);
  }
}

// --- model/parts/ClassMetrics.h -----------------------------------------------------------------

// AUC by counting pairs (positive above negative, ties half): independent of the rank formula.
double pairwiseAuc(const std::vector<double>& score, const std::vector<bool>& positive) {
  double wins = 0, pairs = 0;
  for (std::size_t i = 0; i < score.size(); ++i) {
    for (std::size_t j = 0; j < score.size(); ++j) {
      if (!positive[i] || positive[j]) continue;
      pairs += 1;
      wins += score[i] > score[j] ? 1.0 : (score[i] == score[j] ? 0.5 : 0.0);
    }
  }
  return wins / pairs;
}

TEST(GraphsMetrics, MacroPrecisionRecallF1AndAuc) {
  // Labels 0 0 1 1 2 2, predictions 0 1 1 1 2 0 (logits put the prediction first).
  at::Tensor labels = at::tensor({0, 0, 1, 1, 2, 2}, at::kLong);
  at::Tensor logits = at::tensor({3.0, 1.0, 0.0, 0.5, 2.0, 0.0, 0.0, 2.5, 0.5,  //
                                  1.0, 1.5, 0.0, 0.0, 0.2, 0.9, 2.0, 0.0, 1.0})
                          .view({6, 3});
  auto m = model::classificationMetrics(model::classificationRows(logits, labels));
  // Per class (P, R): 0 (1/2, 1/2), 1 (2/3, 1), 2 (1, 1/2).
  EXPECT_NEAR(m["precision"], (0.5 + 2.0 / 3 + 1.0) / 3, 1e-12);
  EXPECT_NEAR(m["recall"], (0.5 + 1.0 + 0.5) / 3, 1e-12);
  EXPECT_NEAR(m["f1"], (0.5 + 0.8 + 2.0 / 3) / 3, 1e-12);
  at::Tensor p = at::softmax(logits.to(at::kDouble), 1);
  double auc = 0;
  for (int c = 0; c < 3; ++c) {
    std::vector<double> score;
    std::vector<bool> positive;
    for (int i = 0; i < 6; ++i) {
      score.push_back(p[i][c].item<double>());
      positive.push_back(labels[i].item<std::int64_t>() == c);
    }
    auc += pairwiseAuc(score, positive) / 3;
  }
  EXPECT_NEAR(m["roc_auc"], auc, 1e-12);
}

TEST(GraphsMetrics, BinaryAucIsThatOfClassOneWithTiesCountedHalf) {
  at::Tensor labels = at::tensor({0, 1, 0, 1}, at::kLong);
  at::Tensor logits = at::tensor({0.0, 1.0, 0.0, 1.0, 0.0, -1.0, 0.0, 2.0}).view({4, 2});
  auto m = model::classificationMetrics(model::classificationRows(logits, labels));
  // Positives score p1 = s(1), s(2); negatives s(1), s(-1): pairs 4, wins 0.5 + 1 + 1 + 1.
  EXPECT_NEAR(m["roc_auc"], 3.5 / 4, 1e-12);
  at::Tensor oneClass = at::tensor({1, 1, 1, 1}, at::kLong);
  auto undefined = model::classificationMetrics(model::classificationRows(logits, oneClass));
  EXPECT_TRUE(std::isnan(undefined["roc_auc"]));
}

// --- data/tools/Json.h ---------------------------------------------------------------------------

TEST(GraphsJson, ParsesValuesEscapesAndPythonsNonFiniteLiterals) {
  json::Value v = json::parse(
      R"( {"id": "g\u00e91\n", "x": [[1, -2.5e1], []], "ok": true, "none": null, "n": NaN} )");
  ASSERT_TRUE(v.isObject());
  EXPECT_EQ(v.find("id")->text,
            "g\xc3\xa9"
            "1\n");
  const json::Value& x = *v.find("x");
  ASSERT_EQ(x.items.size(), 2u);
  EXPECT_TRUE(x.items[0].items[0].isInteger());
  EXPECT_EQ(x.items[0].items[0].integer, 1);
  EXPECT_FALSE(x.items[0].items[1].isInteger());
  EXPECT_EQ(x.items[0].items[1].number, -25.0);
  EXPECT_TRUE(v.find("ok")->boolean);
  EXPECT_EQ(v.find("none")->type, json::Value::Type::kNull);
  EXPECT_TRUE(std::isnan(v.find("n")->number));
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(GraphsJson, ErrorsNameTheColumn) {
  struct Bad {
    const char* text;
    std::size_t column;
    const char* fragment;
  };
  for (const Bad& bad :
       {Bad{R"({"a": 1,})", 9, "expected a quoted key"}, Bad{R"([1, 2)", 6, "missing ']'"},
        Bad{R"({"a" 1})", 6, "expected ':'"}, Bad{R"({"a": tru})", 7, "unexpected 't'"},
        Bad{R"({"a": 01})", 9, "leading 0"}, Bad{R"({"a": "x)", 9, "unterminated string"},
        Bad{R"({} {})", 4, "after the value"}}) {
    try {
      json::parse(bad.text);
      ADD_FAILURE() << bad.text << " parsed";
    } catch (const json::ParseError& e) {
      EXPECT_EQ(e.column(), bad.column) << bad.text << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(bad.fragment), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace mb
