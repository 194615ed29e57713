// Properties of Note [Canonical global order] for V in {1, 4, 64} and W in {1, 2, 3, 4, 8}:
// rank shares merge into the W=1 batches, every epoch visits every item once, seeds and
// epochs change the order, and the chunk-major (stream) order has the same properties.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "data/pipeline/GlobalOrder.h"

namespace mb::data {
namespace {

constexpr std::int64_t kItems = 997;  // not divisible by V or G: unequal shards, short last batch
constexpr std::int64_t kBatch = 40;

struct Case {
  std::int64_t shards;
  std::int64_t chunkItems;
};

class GlobalOrderProperty : public ::testing::TestWithParam<Case> {};

// The items of batch b that belong to shards [range), in batch order.
std::vector<std::int64_t> restrictTo(const GlobalOrder& order,
                                     const std::vector<std::int64_t>& items, ShardRange range) {
  ItemRange own = order.itemsOfShards(range);
  std::vector<std::int64_t> out;
  for (auto item : items) {
    if (item >= own.begin && item < own.end) out.push_back(item);
  }
  return out;
}

TEST_P(GlobalOrderProperty, RankSharesMergeIntoTheSingleRankBatches) {
  const Case c = GetParam();
  GlobalOrder order(kItems, c.shards, 7, kBatch, true, c.chunkItems);
  for (int world : {1, 2, 3, 4, 8}) {
    for (std::int64_t epoch : {0, 3}) {
      std::vector<GlobalOrder::Share> shares;
      for (int r = 0; r < world; ++r)
        shares.push_back(order.epochShare(epoch, GlobalOrder::shardsOfRank(c.shards, r, world)));
      for (std::int64_t b = 0; b < order.batchesPerEpoch(); ++b) {
        std::vector<std::int64_t> full = order.batchItems(epoch, b);
        ASSERT_EQ(static_cast<std::int64_t>(full.size()), order.batchSize(b));
        std::int64_t total = 0;
        for (int r = 0; r < world; ++r) {
          const auto& share = shares[r];
          std::vector<std::int64_t> mine(share.items.begin() + share.offsets[b],
                                         share.items.begin() + share.offsets[b + 1]);
          // Same items, same order as the W=1 batch restricted to this rank's shards.
          EXPECT_EQ(mine, restrictTo(order, full, GlobalOrder::shardsOfRank(c.shards, r, world)))
              << "V=" << c.shards << " W=" << world << " rank " << r << " batch " << b;
          total += static_cast<std::int64_t>(mine.size());
        }
        EXPECT_EQ(total, order.batchSize(b));
      }
    }
  }
}

TEST_P(GlobalOrderProperty, EachEpochVisitsEveryItemOnce) {
  const Case c = GetParam();
  GlobalOrder order(kItems, c.shards, 11, kBatch, true, c.chunkItems);
  for (std::int64_t epoch : {0, 1, 2}) {
    std::vector<std::int64_t> seen;
    for (std::int64_t b = 0; b < order.batchesPerEpoch(); ++b) {
      auto items = order.batchItems(epoch, b);
      seen.insert(seen.end(), items.begin(), items.end());
    }
    std::sort(seen.begin(), seen.end());
    std::vector<std::int64_t> expected(kItems);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(seen, expected) << "epoch " << epoch;
  }
}

TEST_P(GlobalOrderProperty, RanksOwnContiguousWholeShards) {
  const Case c = GetParam();
  GlobalOrder order(kItems, c.shards, 1, kBatch, true, c.chunkItems);
  for (int world : {1, 2, 3, 4, 8}) {
    std::int64_t next = 0;
    for (int r = 0; r < world; ++r) {
      ItemRange items = order.itemsOfShards(GlobalOrder::shardsOfRank(c.shards, r, world));
      EXPECT_EQ(items.begin, next);
      next = items.end;
    }
    EXPECT_EQ(next, kItems);
  }
}

TEST_P(GlobalOrderProperty, SeedsAndEpochsChangeTheOrder) {
  const Case c = GetParam();
  GlobalOrder a(kItems, c.shards, 1, kBatch, true, c.chunkItems);
  GlobalOrder b(kItems, c.shards, 2, kBatch, true, c.chunkItems);
  GlobalOrder again(kItems, c.shards, 1, kBatch, true, c.chunkItems);
  auto epoch = [](const GlobalOrder& o, std::int64_t e) {
    std::vector<std::int64_t> all;
    for (std::int64_t batch = 0; batch < o.batchesPerEpoch(); ++batch) {
      auto items = o.batchItems(e, batch);
      all.insert(all.end(), items.begin(), items.end());
    }
    return all;
  };
  EXPECT_EQ(epoch(a, 0), epoch(again, 0));  // a pure function of its arguments
  EXPECT_NE(epoch(a, 0), epoch(b, 0));
  EXPECT_NE(epoch(a, 0), epoch(a, 1));
}

INSTANTIATE_TEST_SUITE_P(
    GlobalOrder, GlobalOrderProperty,
    ::testing::Values(Case{1, 0}, Case{4, 0}, Case{64, 0}, Case{1, 16}, Case{4, 16}, Case{64, 4}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return "V" + std::to_string(info.param.shards) +
             (info.param.chunkItems ? "Chunk" + std::to_string(info.param.chunkItems) : "");
    });

TEST(GlobalOrder, ChunkMajorVisitsEachChunkContiguously) {
  for (std::int64_t shards : {1, 4, 64}) {
    std::int64_t chunkItems = shards == 64 ? 4 : 16;
    GlobalOrder order(kItems, shards, 5, kBatch, true, chunkItems);
    for (std::int64_t s = 0; s < shards; ++s) {
      ItemRange range = order.shardItems(s);
      std::set<std::int64_t> finished;
      std::int64_t current = -1, switches = 0;
      for (auto item : order.shardOrder(2, s)) {
        std::int64_t chunk = (item - range.begin) / chunkItems;
        if (chunk == current) continue;
        EXPECT_FALSE(finished.count(chunk))
            << "V=" << shards << ": chunk " << chunk << " of shard " << s << " visited twice";
        if (current >= 0) finished.insert(current);
        current = chunk;
        ++switches;
      }
      EXPECT_EQ(switches, (range.size() + chunkItems - 1) / chunkItems);
    }
    // Chunks themselves are visited in a shuffled order somewhere.
    auto first = order.shardOrder(0, 0);
    EXPECT_FALSE(std::is_sorted(first.begin(), first.end()));
  }
}

TEST(GlobalOrder, TimeOrderWithoutShuffle) {
  GlobalOrder order(100, 4, 3, 8, false);
  for (std::int64_t s = 0; s < 4; ++s) {
    auto visit = order.shardOrder(5, s);
    EXPECT_TRUE(std::is_sorted(visit.begin(), visit.end()));
    EXPECT_EQ(visit.front(), order.shardItems(s).begin);
  }
  // Round robin: batch 0 takes the first item of each shard, then the second of each.
  EXPECT_EQ(order.batchItems(0, 0), (std::vector<std::int64_t>{0, 25, 50, 75, 1, 26, 51, 76}));
}

TEST(GlobalOrder, ShortLastBatchAndUnequalShards) {
  GlobalOrder order(10, 3, 0, 4, true);
  EXPECT_EQ(order.batchesPerEpoch(), 3);
  EXPECT_EQ(order.batchSize(2), 2);
  EXPECT_EQ(order.shardItems(0).size() + order.shardItems(1).size() + order.shardItems(2).size(),
            10);
  EXPECT_THROW(GlobalOrder(3, 4, 0, 4, true), std::invalid_argument);
}

TEST(GlobalOrder, SeededShuffleIsAPermutation) {
  std::vector<std::int64_t> values(1000);
  std::iota(values.begin(), values.end(), 0);
  auto shuffled = values;
  seededShuffle(shuffled, 42);
  EXPECT_NE(shuffled, values);
  auto again = values;
  seededShuffle(again, 42);
  EXPECT_EQ(shuffled, again);
  std::sort(shuffled.begin(), shuffled.end());
  EXPECT_EQ(shuffled, values);
}

}  // namespace
}  // namespace mb::data
