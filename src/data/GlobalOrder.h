#pragma once
// Note [Canonical global order]
// The order in which training items are visited is a pure function of
// (n, V, seed, epoch, shuffle, chunkItems) and never of the world size W. This is what lets
// a run checkpointed on W ranks resume on any W' <= V ranks and see exactly the batches an
// uninterrupted run would have seen (DESIGN.md "Splits and global order").
//
//  - Items 0..n-1 (train split, time order) are cut into V contiguous canonical shards:
//      shard s = [floor(s*n/V), floor((s+1)*n/V)).
//  - Within a shard, epoch e visits items in an order that depends on (seed, e, s) alone:
//    time order, or (shuffle) a seeded permutation. With chunkItems > 0 (stream residency)
//    the permutation is chunk-major: the shard's consecutive chunks of chunkItems items are
//    visited in a seeded order, items shuffled within each chunk, so a streaming rank needs
//    only the current chunk of each of its shards in memory.
//  - The global sequence takes items round-robin across shards: the k-th item of shard 0,
//    of shard 1, ..., of shard V-1, then the (k+1)-th of each. Shards differ in length by at
//    most one; the last round skips shards that have run out.
//  - Global batch b of an epoch is positions [b*G, min((b+1)*G, n)) of that sequence. The
//    last batch of an epoch may be short; every item appears exactly once per epoch.
//  - Rank r of W owns shards [floor(r*V/W), floor((r+1)*V/W)): one contiguous item range, so
//    one hyperslab read. Its share of a global batch is the batch's items from its shards,
//    in global order; shares may differ in size by rank.
#include <cstdint>
#include <vector>

namespace mb::data {

struct ShardRange {
  std::int64_t begin = 0;  // first shard
  std::int64_t end = 0;    // one past the last shard
};

struct ItemRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
};

class GlobalOrder {
 public:
  GlobalOrder(std::int64_t numItems, std::int64_t numShards, std::uint64_t seed,
              std::int64_t globalBatch, bool shuffle, std::int64_t chunkItems = 0);

  std::int64_t numItems() const { return numItems_; }
  std::int64_t numShards() const { return numShards_; }
  std::int64_t globalBatch() const { return globalBatch_; }
  bool shuffle() const { return shuffle_; }
  std::int64_t chunkItems() const { return chunkItems_; }
  std::int64_t batchesPerEpoch() const;
  // Items in global batch b (G, or fewer for the epoch's last batch).
  std::int64_t batchSize(std::int64_t batch) const;

  ItemRange shardItems(std::int64_t shard) const;
  static ShardRange shardsOfRank(std::int64_t numShards, int rank, int worldSize);
  ItemRange itemsOfShards(ShardRange shards) const;

  // Shard s's items in epoch e's visiting order (item indices, 0-based in the train split).
  std::vector<std::int64_t> shardOrder(std::int64_t epoch, std::int64_t shard) const;
  // The items of global batch b of epoch e, in global order.
  std::vector<std::int64_t> batchItems(std::int64_t epoch, std::int64_t batch) const;

  // Every item of one epoch from shards [shards.begin, shards.end), grouped by global batch:
  // items[offsets[b] .. offsets[b+1]) is this share of batch b, in global order.
  struct Share {
    std::vector<std::int64_t> items;
    std::vector<std::int64_t> offsets;  // batchesPerEpoch() + 1 entries
  };
  Share epochShare(std::int64_t epoch, ShardRange shards) const;

 private:
  // Position p of the global sequence -> (shard, index within the shard's order).
  void locate(std::int64_t position, std::int64_t& shard, std::int64_t& index) const;

  std::int64_t numItems_;
  std::int64_t numShards_;
  std::uint64_t seed_;
  std::int64_t globalBatch_;
  bool shuffle_;
  std::int64_t chunkItems_;
  std::int64_t shortLength_;              // floor(n / V): every shard has at least this many
  std::vector<std::int64_t> longShards_;  // shards with shortLength_ + 1 items, ascending
};

// Deterministic, platform-independent random numbers for data order (not std::shuffle,
// whose algorithm differs between standard libraries).
std::uint64_t mixSeed(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c);
void seededShuffle(std::vector<std::int64_t>& values, std::uint64_t seed);

}  // namespace mb::data
