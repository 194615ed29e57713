// Properties of Note [Lane order] (data/pipeline/GlobalOrder.h) for V in {1, 4, 8}, W in {1, 2, 3,
// 4}, several lane counts and strides: rank shares merge into the W=1 batches, batches hold lanes
// 0..V*L-1 in order, a lane advances by exactly `stride` inside itself, every epoch covers
// offsets [0, m) of every lane once, and the stateful config rules (G = V*L, no streaming).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <tuple>

#include "config/Config.h"
#include "config/ConfigValidator.h"
#include "data/pipeline/GlobalOrder.h"

namespace mb::data {
namespace {

constexpr std::int64_t kLaneItems = 997;  // prime: unequal shards and lanes

struct LaneCase {
  std::int64_t shards;  // V
  std::int64_t lanes;   // L
  std::int64_t stride;
};

GlobalOrder laneOrder(const LaneCase& c) {
  return GlobalOrder(kLaneItems, c.shards, 7, c.shards * c.lanes, false, 0, {c.lanes, c.stride});
}

std::string describe(const LaneCase& c) {
  return "V=" + std::to_string(c.shards) + " L=" + std::to_string(c.lanes) +
         " stride=" + std::to_string(c.stride);
}

class LaneOrderProperty : public ::testing::TestWithParam<LaneCase> {};

TEST_P(LaneOrderProperty, LanesCutEachShardIntoContiguousStreams) {
  const LaneCase c = GetParam();
  GlobalOrder order = laneOrder(c);
  ASSERT_EQ(order.numLanes(), c.shards * c.lanes);
  std::int64_t next = 0, shortest = kLaneItems;
  for (std::int64_t lane = 0; lane < order.numLanes(); ++lane) {
    ItemRange items = order.laneItems(lane);
    EXPECT_EQ(items.begin, next) << describe(c) << " lane " << lane;
    ItemRange shard = order.shardItems(lane / c.lanes);
    EXPECT_GE(items.begin, shard.begin);
    EXPECT_LE(items.end, shard.end);
    shortest = std::min(shortest, items.size());
    next = items.end;
  }
  EXPECT_EQ(next, kLaneItems);
  EXPECT_EQ(order.shortestLane(), shortest) << describe(c);
  for (std::int64_t lane = 0; lane < order.numLanes(); ++lane)
    EXPECT_LE(order.laneItems(lane).size(), shortest + 1) << describe(c);
}

TEST_P(LaneOrderProperty, RankSharesMergeIntoTheSingleRankBatches) {
  const LaneCase c = GetParam();
  GlobalOrder order = laneOrder(c);
  for (int world : {1, 2, 3, 4}) {
    if (world > c.shards) continue;
    std::vector<GlobalOrder::Share> shares;
    for (int r = 0; r < world; ++r)
      shares.push_back(order.epochShare(2, GlobalOrder::shardsOfRank(c.shards, r, world)));
    for (std::int64_t b = 0; b < order.batchesPerEpoch(); ++b) {
      std::vector<std::int64_t> items, lanes;
      for (const auto& share : shares) {
        items.insert(items.end(), share.items.begin() + share.offsets[b],
                     share.items.begin() + share.offsets[b + 1]);
        lanes.insert(lanes.end(), share.lanes.begin() + share.offsets[b],
                     share.lanes.begin() + share.offsets[b + 1]);
      }
      EXPECT_EQ(items, order.batchItems(2, b)) << describe(c) << " W=" << world << " batch " << b;
      std::vector<std::int64_t> all(order.numLanes());
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(lanes, all) << describe(c) << " W=" << world << " batch " << b;
      EXPECT_EQ(static_cast<std::int64_t>(items.size()), order.batchSize(b));
    }
  }
}

TEST_P(LaneOrderProperty, LanesAdvanceByTheStrideInsideThemselves) {
  const LaneCase c = GetParam();
  GlobalOrder order = laneOrder(c);
  std::vector<std::int64_t> previous;
  std::int64_t passes = 0;
  for (std::int64_t b = 0; b < order.batchesPerEpoch(); ++b) {
    std::vector<std::int64_t> items = order.batchItems(0, b);
    ASSERT_EQ(static_cast<std::int64_t>(items.size()), c.shards * c.lanes);
    LaneStep at = order.laneStep(b);
    if (at.step == 0) {
      EXPECT_EQ(at.pass, passes) << describe(c) << " batch " << b;
      ++passes;
    }
    for (std::int64_t lane = 0; lane < order.numLanes(); ++lane) {
      ItemRange range = order.laneItems(lane);
      EXPECT_GE(items[lane], range.begin);
      EXPECT_LT(items[lane], range.end) << describe(c) << " lane " << lane << " batch " << b;
      if (at.step == 0)
        EXPECT_EQ(items[lane], range.begin + at.pass) << describe(c) << " batch " << b;
      else
        EXPECT_EQ(items[lane] - previous[lane], c.stride) << describe(c) << " batch " << b;
    }
    previous = items;
  }
  EXPECT_EQ(passes, std::min(c.stride, order.shortestLane())) << describe(c);
}

// The documented rule: an epoch visits offsets [0, m) of every lane exactly once, m the
// shortest lane; it skips only the last item of lanes of length m + 1.
TEST_P(LaneOrderProperty, EveryEpochCoversTheShortestLaneLengthOnce) {
  const LaneCase c = GetParam();
  GlobalOrder order = laneOrder(c);
  for (std::int64_t epoch : {0, 5}) {
    std::map<std::int64_t, int> seen;
    for (std::int64_t b = 0; b < order.batchesPerEpoch(); ++b) {
      for (std::int64_t item : order.batchItems(epoch, b))
        ++seen[item];
    }
    const std::int64_t m = order.shortestLane();
    EXPECT_EQ(order.batchesPerEpoch(), m);
    std::int64_t skipped = 0;
    for (std::int64_t lane = 0; lane < order.numLanes(); ++lane) {
      ItemRange range = order.laneItems(lane);
      for (std::int64_t item = range.begin; item < range.end; ++item) {
        bool covered = item - range.begin < m;
        EXPECT_EQ(seen.count(item) ? seen[item] : 0, covered ? 1 : 0)
            << describe(c) << " lane " << lane << " item " << item;
        skipped += covered ? 0 : 1;
      }
    }
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()) + skipped, kLaneItems);
    EXPECT_LE(skipped, order.numLanes());
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, LaneOrderProperty,
                         ::testing::Values(LaneCase{1, 1, 1}, LaneCase{1, 8, 3}, LaneCase{4, 3, 1},
                                           LaneCase{4, 2, 4}, LaneCase{8, 5, 2}, LaneCase{8, 1, 7},
                                           LaneCase{4, 3, 200}));

TEST(LaneOrder, RoundRobinOrderHasNoLanes) {
  GlobalOrder order(kLaneItems, 4, 7, 40, false);
  EXPECT_FALSE(order.laneOrder());
  EXPECT_EQ(order.numLanes(), 0);
  EXPECT_TRUE(order.epochShare(0, {0, 4}).lanes.empty());
  EXPECT_EQ(order.batchesPerEpoch(), (kLaneItems + 39) / 40);
}

TEST(LaneOrder, RejectsABatchThatIsNotOneItemPerLane) {
  EXPECT_THROW(GlobalOrder(kLaneItems, 4, 7, 30, false, 0, {8, 1}), std::invalid_argument);
  EXPECT_THROW(GlobalOrder(kLaneItems, 4, 7, 32, false, 0, {8, 0}), std::invalid_argument);
  EXPECT_THROW(GlobalOrder(40, 4, 7, 44, false, 0, {11, 1}), std::invalid_argument);  // empty lanes
  EXPECT_NO_THROW(GlobalOrder(40, 4, 7, 40, false, 0, {10, 1}));
}

Config statefulConfig(std::int64_t shards, std::int64_t batch, std::int64_t lanes) {
  Config c;
  c.model.kind = "lstm";
  c.model.stateful = true;
  c.model.lanes = lanes;
  c.data.shuffle = false;
  c.data.canonicalShards = shards;
  c.train.globalBatch = batch;
  return c;
}

std::string problems(const Config& c) {
  std::string text;
  for (const auto& problem : validateConfig(c))
    text += problem + "\n";
  return text;
}

TEST(LaneOrderConfig, GlobalBatchMustBeOneItemPerLane) {
  EXPECT_EQ(problems(statefulConfig(8, 64, 0)), "");
  EXPECT_EQ(problems(statefulConfig(8, 64, 8)), "");
  for (std::int64_t shards : {4, 8}) {
    std::string text = problems(statefulConfig(shards, 30, 0));
    EXPECT_NE(text.find("train.global_batch = 30 is not a multiple of data.canonical_shards = " +
                        std::to_string(shards)),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("set train.global_batch to a multiple of data.canonical_shards"),
              std::string::npos)
        << text;
  }
  std::string text = problems(statefulConfig(8, 64, 3));
  EXPECT_NE(text.find("must equal data.canonical_shards x model.lanes = 8 x 3"), std::string::npos)
      << text;
  Config stride = statefulConfig(8, 64, 0);
  stride.model.laneStride = 0;
  EXPECT_NE(problems(stride).find("model.lane_stride = 0 must be >= 1"), std::string::npos);
  // Without stateful, the lane rules do not apply.
  Config plain = statefulConfig(8, 30, 3);
  plain.model.stateful = false;
  EXPECT_EQ(problems(plain), "");
}

TEST(LaneOrderConfig, StreamResidencyIsRejected) {
  Config c = statefulConfig(8, 64, 0);
  c.data.residency = Residency::kStream;
  EXPECT_NE(problems(c).find("cannot use data.residency = stream"), std::string::npos);
}

}  // namespace
}  // namespace mb::data
