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
//
// Note [Lane order]
// With lanes (model.stateful: truncated-BPTT training of an LSTM that carries its hidden
// state from one step to the next), the order is instead a function of (n, V, L, stride):
//  - Shard s = [a, b) is cut into L contiguous lanes: lane l = [a + floor(l*len/L),
//    a + floor((l+1)*len/L)), len = b - a. Its global lane id is s*L + l. All lanes have
//    length m or m+1, m = the shortest lane (>= 1 is required).
//  - The global batch is G = V*L: one item per lane per step, rows ordered by global lane
//    id (shard-major), so rank r's share is the contiguous lanes of its shards.
//  - A lane advances `stride` items per step. An epoch is `stride` passes: pass p visits
//    items laneBegin + p + k*stride, k = 0..K_p-1, K_p = ceil((m - p) / stride) (0 when
//    p >= m). So an epoch has m batches and visits offsets 0..m-1 of every lane exactly once;
//    a lane one item longer than m skips its last item (at most one item per lane per epoch,
//    so that every batch stays full). The order is the same in every epoch.
//  - A pass jumps back in time, so carried states restart at every pass start (laneStep()
//    reports step 0), which includes the start of every epoch.
//
// Note [Weighted shards]
// When samples differ in cost (graphs: nodes per graph; Layout::sampleCosts), equal-count shards
// give one rank more work per step than another, and every rank waits for the slowest. With
// costs c_0..c_{n-1} (a function of the file alone) the order is instead a function of
// (n, V, seed, G, costs), still never of W:
//  - Shard boundaries cut the cumulative cost into V near-equal parts: cut_s (0 < s < V) is the
//    item i whose prefix cost c_0 + ... + c_{i-1} is nearest to s/V of the total (the first
//    such i on a tie), moved so that every shard keeps at least one item. Shards now differ in
//    length (a shard of small graphs holds more of them).
//  - The global sequence draws from each shard in proportion to its length: the k-th item of
//    shard s (k = 0..L_s-1) sits at key (k + 1/2) / L_s, and the sequence is all items sorted
//    by key (ties: lower shard first). Every batch of G items then takes about G * L_s / n
//    items from shard s, i.e. about the same cost from every shard, and a rank's share of each
//    batch is proportional to its shards' cost. With equal lengths this is the round-robin.
//  - Everything else is as in Note [Canonical global order]: shuffling within shards by
//    (seed, epoch, shard), batches [b*G, (b+1)*G), rank r owning shards [rV/W, (r+1)V/W).
//  Not combined with lanes or with the chunks of stream residency.
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

// Note [Lane order]: lanesPerShard = 0 selects the round-robin order.
struct LaneSpec {
  std::int64_t lanesPerShard = 0;  // L
  std::int64_t stride = 1;         // items a lane advances per step
};

// Where global batch b of an epoch falls in lane order.
struct LaneStep {
  std::int64_t pass = 0;  // 0..stride-1
  std::int64_t step = 0;  // k within the pass; 0 = the lanes restart
};

class GlobalOrder {
 public:
  // `costs`: empty, or one non-negative cost per item (Note [Weighted shards]).
  GlobalOrder(std::int64_t numItems, std::int64_t numShards, std::uint64_t seed,
              std::int64_t globalBatch, bool shuffle, std::int64_t chunkItems = 0,
              LaneSpec lanes = {}, const std::vector<std::int64_t>& costs = {});

  std::int64_t numItems() const { return numItems_; }
  std::int64_t numShards() const { return numShards_; }
  std::int64_t globalBatch() const { return globalBatch_; }
  bool shuffle() const { return shuffle_; }
  std::int64_t chunkItems() const { return chunkItems_; }
  std::int64_t batchesPerEpoch() const;
  // Items in global batch b (G, or fewer for the epoch's last batch).
  std::int64_t batchSize(std::int64_t batch) const;

  ItemRange shardItems(std::int64_t shard) const;
  bool weighted() const { return !cuts_.empty(); }  // Note [Weighted shards]

  // --- lane order (Note [Lane order]) ---
  bool laneOrder() const { return lanes_.lanesPerShard > 0; }
  const LaneSpec& lanes() const { return lanes_; }
  std::int64_t numLanes() const { return numShards_ * lanes_.lanesPerShard; }  // V*L, or 0
  ItemRange laneItems(std::int64_t lane) const;  // global lane id -> its items
  std::int64_t shortestLane() const;             // m: the lane length every epoch covers
  LaneStep laneStep(std::int64_t batch) const;
  // Global lane ids of shards [shards.begin, shards.end): one contiguous range.
  ItemRange lanesOfShards(ShardRange shards) const;

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
    std::vector<std::int64_t> lanes;    // lane order: global lane id of each item; else empty
  };
  Share epochShare(std::int64_t epoch, ShardRange shards) const;

 private:
  // Position p of the global sequence -> (shard, index within the shard's order).
  void locate(std::int64_t position, std::int64_t& shard, std::int64_t& index) const;
  // Item of lane `lane` at lane step `at`.
  std::int64_t laneItem(std::int64_t lane, LaneStep at) const;
  Share laneShare(ShardRange shards) const;
  // Note [Weighted shards]: the cuts and the proportional interleave.
  void buildWeightedOrder(const std::vector<std::int64_t>& costs);

  std::int64_t numItems_;
  std::int64_t numShards_;
  std::uint64_t seed_;
  std::int64_t globalBatch_;
  bool shuffle_;
  std::int64_t chunkItems_;
  LaneSpec lanes_;
  std::int64_t shortLength_;              // floor(n / V): every shard has at least this many
  std::vector<std::int64_t> longShards_;  // shards with shortLength_ + 1 items, ascending
  // Weighted order only (empty otherwise):
  std::vector<std::int64_t> cuts_;           // [V + 1] shard boundaries
  std::vector<std::int64_t> sequenceShard_;  // [n] shard of each position of the sequence
  std::vector<std::int64_t> sequenceIndex_;  // [n] index in that shard's visiting order
};

// Deterministic, platform-independent random numbers for data order (not std::shuffle,
// whose algorithm differs between standard libraries).
std::uint64_t mixSeed(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c);
void seededShuffle(std::vector<std::int64_t>& values, std::uint64_t seed);

}  // namespace mb::data
