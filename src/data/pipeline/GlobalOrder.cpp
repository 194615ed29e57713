#include "data/pipeline/GlobalOrder.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace mb::data {
namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Unbiased integer in [0, range) (Lemire's multiply-and-reject).
std::uint64_t bounded(std::uint64_t& state, std::uint64_t range) {
  while (true) {
    unsigned __int128 product = static_cast<unsigned __int128>(splitmix64(state)) * range;
    auto low = static_cast<std::uint64_t>(product);
    if (low >= range || low >= (-range) % range) return static_cast<std::uint64_t>(product >> 64);
  }
}

constexpr std::uint64_t kChunkOrderSalt = ~std::uint64_t{0};

}  // namespace

std::uint64_t mixSeed(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t state = seed;
  std::uint64_t mixed = splitmix64(state);
  for (std::uint64_t part : {a, b, c}) {
    state = mixed ^ (part * 0xD6E8FEB86659FD93ULL);
    mixed = splitmix64(state);
  }
  return mixed;
}

void seededShuffle(std::vector<std::int64_t>& values, std::uint64_t seed) {
  std::uint64_t state = seed;
  for (std::size_t i = values.size(); i > 1; --i) {
    std::size_t j = static_cast<std::size_t>(bounded(state, i));
    std::swap(values[i - 1], values[j]);
  }
}

GlobalOrder::GlobalOrder(std::int64_t numItems, std::int64_t numShards, std::uint64_t seed,
                         std::int64_t globalBatch, bool shuffle, std::int64_t chunkItems,
                         LaneSpec lanes, const std::vector<std::int64_t>& costs)
    : numItems_(numItems),
      numShards_(numShards),
      seed_(seed),
      globalBatch_(globalBatch),
      shuffle_(shuffle),
      chunkItems_(chunkItems),
      lanes_(lanes) {
  if (numShards < 1 || numItems < numShards || globalBatch < 1)
    throw std::invalid_argument("GlobalOrder needs 1 <= V <= items and a positive batch");
  shortLength_ = numItems / numShards;
  // The loader reports these as config and data errors first (ShardedData.cpp, laneSpec).
  if (laneOrder() && (lanes.stride < 1 || globalBatch != numLanes() || shortestLane() < 1 ||
                      shuffle || chunkItems > 0))
    throw std::invalid_argument(
        "GlobalOrder lane order needs G = V*L, stride >= 1, lanes of >= 1 item, time order, and "
        "no chunks");
  if (!costs.empty()) {
    buildWeightedOrder(costs);
    return;
  }
  for (std::int64_t s = 0; s < numShards; ++s) {
    if (shardItems(s).size() > shortLength_) longShards_.push_back(s);
  }
}

namespace {

// Note [Weighted shards]: V + 1 boundaries cutting the cumulative cost into near-equal parts,
// every shard keeping at least one item. Equal-count cuts when every cost is 0.
std::vector<std::int64_t> costCuts(const std::vector<std::int64_t>& costs, std::int64_t shards) {
  const auto n = static_cast<std::int64_t>(costs.size());
  std::vector<__int128> prefix(costs.size() + 1, 0);
  for (std::size_t i = 0; i < costs.size(); ++i)
    prefix[i + 1] = prefix[i] + costs[i];
  const __int128 total = prefix.back();
  std::vector<std::int64_t> cuts(static_cast<std::size_t>(shards) + 1, n);
  cuts[0] = 0;
  for (std::int64_t s = 1; s < shards; ++s) {
    std::int64_t cut = 0;
    if (total == 0) {
      cut = static_cast<std::int64_t>(static_cast<__int128>(s) * n / shards);
    } else {
      // prefix[i] * V compared with s * total: exact, no rounding.
      const __int128 target = static_cast<__int128>(s) * total;
      auto above = std::lower_bound(prefix.begin(), prefix.end(), target,
                                    [&](__int128 p, __int128 t) { return p * shards < t; });
      cut = static_cast<std::int64_t>(above - prefix.begin());
      if (cut > 0) {
        __int128 over = prefix[cut] * shards - target;
        __int128 under = target - prefix[cut - 1] * shards;
        if (under <= over) cut -= 1;
      }
    }
    cuts[s] = std::clamp(cut, cuts[s - 1] + 1, n - (shards - s));
  }
  return cuts;
}

}  // namespace

void GlobalOrder::buildWeightedOrder(const std::vector<std::int64_t>& costs) {
  if (static_cast<std::int64_t>(costs.size()) != numItems_ || laneOrder() || chunkItems_ > 0)
    throw std::invalid_argument(
        "GlobalOrder: weighted shards need one cost per item, and neither lanes nor chunks");
  for (std::int64_t cost : costs) {
    if (cost < 0) throw std::invalid_argument("GlobalOrder: a sample cost is negative");
  }
  cuts_ = costCuts(costs, numShards_);
  // Item k of shard s at key (2k + 1) / (2 L_s); compare (2k+1) L_t with (2j+1) L_s exactly.
  struct Slot {
    std::int64_t shard, index, length;
  };
  std::vector<Slot> slots;
  slots.reserve(static_cast<std::size_t>(numItems_));
  for (std::int64_t s = 0; s < numShards_; ++s) {
    const std::int64_t length = cuts_[s + 1] - cuts_[s];
    for (std::int64_t k = 0; k < length; ++k)
      slots.push_back({s, k, length});
  }
  std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
    __int128 left = static_cast<__int128>(2 * a.index + 1) * b.length;
    __int128 right = static_cast<__int128>(2 * b.index + 1) * a.length;
    return left != right ? left < right : a.shard < b.shard;
  });
  sequenceShard_.reserve(slots.size());
  sequenceIndex_.reserve(slots.size());
  for (const Slot& slot : slots) {
    sequenceShard_.push_back(slot.shard);
    sequenceIndex_.push_back(slot.index);
  }
}

std::int64_t GlobalOrder::batchesPerEpoch() const {
  if (laneOrder()) return shortestLane();  // sum over the passes of K_p
  return (numItems_ + globalBatch_ - 1) / globalBatch_;
}

std::int64_t GlobalOrder::batchSize(std::int64_t batch) const {
  if (laneOrder()) return globalBatch_;
  return std::min(globalBatch_, numItems_ - batch * globalBatch_);
}

ItemRange GlobalOrder::shardItems(std::int64_t shard) const {
  if (weighted()) return {cuts_[shard], cuts_[shard + 1]};
  // 128-bit products: n * V may overflow 64 bits for huge token corpora.
  auto cut = [&](std::int64_t s) {
    return static_cast<std::int64_t>(static_cast<__int128>(s) * numItems_ / numShards_);
  };
  return {cut(shard), cut(shard + 1)};
}

ItemRange GlobalOrder::laneItems(std::int64_t lane) const {
  const std::int64_t perShard = lanes_.lanesPerShard;
  ItemRange shard = shardItems(lane / perShard);
  auto cut = [&](std::int64_t l) {
    return shard.begin +
           static_cast<std::int64_t>(static_cast<__int128>(l) * shard.size() / perShard);
  };
  return {cut(lane % perShard), cut(lane % perShard + 1)};
}

// The shortest shard has floor(n/V) items, and lane 0 of it floor(floor(n/V)/L): no lane is
// shorter (lanes of a shard of length len have floor(len/L) or more items).
std::int64_t GlobalOrder::shortestLane() const {
  return laneOrder() ? shortLength_ / lanes_.lanesPerShard : 0;
}

// Pass p has K_p = q+1 steps for p < r and q steps after, where m = q*stride + r.
LaneStep GlobalOrder::laneStep(std::int64_t batch) const {
  const std::int64_t q = shortestLane() / lanes_.stride;
  const std::int64_t r = shortestLane() % lanes_.stride;
  if (batch < r * (q + 1)) return {batch / (q + 1), batch % (q + 1)};
  const std::int64_t rest = batch - r * (q + 1);  // q >= 1 here, since batch < m
  return {r + rest / q, rest % q};
}

ItemRange GlobalOrder::lanesOfShards(ShardRange shards) const {
  return {shards.begin * lanes_.lanesPerShard, shards.end * lanes_.lanesPerShard};
}

std::int64_t GlobalOrder::laneItem(std::int64_t lane, LaneStep at) const {
  return laneItems(lane).begin + at.pass + at.step * lanes_.stride;
}

ShardRange GlobalOrder::shardsOfRank(std::int64_t numShards, int rank, int worldSize) {
  return {numShards * rank / worldSize, numShards * (rank + 1) / worldSize};
}

ItemRange GlobalOrder::itemsOfShards(ShardRange shards) const {
  if (shards.begin >= shards.end)
    return {shardItems(shards.begin).begin, shardItems(shards.begin).begin};
  return {shardItems(shards.begin).begin, shardItems(shards.end - 1).end};
}

std::vector<std::int64_t> GlobalOrder::shardOrder(std::int64_t epoch, std::int64_t shard) const {
  ItemRange range = shardItems(shard);
  std::vector<std::int64_t> order(range.size());
  std::iota(order.begin(), order.end(), range.begin);
  if (!shuffle_) return order;
  auto e = static_cast<std::uint64_t>(epoch);
  auto s = static_cast<std::uint64_t>(shard);
  if (chunkItems_ <= 0 || chunkItems_ >= range.size()) {
    seededShuffle(order, mixSeed(seed_, e, s, 0));
    return order;
  }
  std::int64_t chunks = (range.size() + chunkItems_ - 1) / chunkItems_;
  std::vector<std::int64_t> chunkOrder(chunks);
  std::iota(chunkOrder.begin(), chunkOrder.end(), 0);
  seededShuffle(chunkOrder, mixSeed(seed_, e, s, kChunkOrderSalt));
  std::vector<std::int64_t> result;
  result.reserve(order.size());
  for (std::int64_t c : chunkOrder) {
    std::int64_t begin = range.begin + c * chunkItems_;
    std::int64_t end = std::min(range.end, begin + chunkItems_);
    std::vector<std::int64_t> chunk(end - begin);
    std::iota(chunk.begin(), chunk.end(), begin);
    seededShuffle(chunk, mixSeed(seed_, e, s, 1 + static_cast<std::uint64_t>(c)));
    result.insert(result.end(), chunk.begin(), chunk.end());
  }
  return result;
}

void GlobalOrder::locate(std::int64_t position, std::int64_t& shard, std::int64_t& index) const {
  if (weighted()) {
    shard = sequenceShard_[position];
    index = sequenceIndex_[position];
    return;
  }
  std::int64_t fullRounds = shortLength_ * numShards_;
  if (position < fullRounds) {
    shard = position % numShards_;
    index = position / numShards_;
  } else {
    shard = longShards_[position - fullRounds];
    index = shortLength_;
  }
}

std::vector<std::int64_t> GlobalOrder::batchItems(std::int64_t epoch, std::int64_t batch) const {
  std::vector<std::int64_t> items;
  if (laneOrder()) {
    for (std::int64_t lane = 0; lane < numLanes(); ++lane)
      items.push_back(laneItem(lane, laneStep(batch)));
    return items;
  }
  std::vector<std::vector<std::int64_t>> orders(numShards_);
  std::int64_t begin = batch * globalBatch_;
  std::int64_t end = std::min(numItems_, begin + globalBatch_);
  for (std::int64_t p = begin; p < end; ++p) {
    std::int64_t shard = 0, index = 0;
    locate(p, shard, index);
    if (orders[shard].empty()) orders[shard] = shardOrder(epoch, shard);
    items.push_back(orders[shard][index]);
  }
  return items;
}

GlobalOrder::Share GlobalOrder::laneShare(ShardRange shards) const {
  ItemRange lanes = lanesOfShards(shards);
  Share share;
  share.items.reserve(static_cast<std::size_t>(lanes.size() * batchesPerEpoch()));
  share.lanes.reserve(share.items.capacity());
  share.offsets.push_back(0);
  for (std::int64_t b = 0; b < batchesPerEpoch(); ++b) {
    LaneStep at = laneStep(b);
    for (std::int64_t lane = lanes.begin; lane < lanes.end; ++lane) {
      share.items.push_back(laneItem(lane, at));
      share.lanes.push_back(lane);
    }
    share.offsets.push_back(static_cast<std::int64_t>(share.items.size()));
  }
  return share;
}

GlobalOrder::Share GlobalOrder::epochShare(std::int64_t epoch, ShardRange shards) const {
  if (laneOrder()) return laneShare(shards);  // the same every epoch
  std::vector<std::vector<std::int64_t>> orders(numShards_);
  for (std::int64_t s = shards.begin; s < shards.end; ++s)
    orders[s] = shardOrder(epoch, s);
  Share share;
  share.items.reserve(static_cast<std::size_t>(itemsOfShards(shards).size()));
  share.offsets.reserve(static_cast<std::size_t>(batchesPerEpoch() + 1));
  share.offsets.push_back(0);
  for (std::int64_t b = 0; b < batchesPerEpoch(); ++b) {
    std::int64_t end = std::min(numItems_, (b + 1) * globalBatch_);
    for (std::int64_t p = b * globalBatch_; p < end; ++p) {
      std::int64_t shard = 0, index = 0;
      locate(p, shard, index);
      if (shard >= shards.begin && shard < shards.end) share.items.push_back(orders[shard][index]);
    }
    share.offsets.push_back(static_cast<std::int64_t>(share.items.size()));
  }
  return share;
}

}  // namespace mb::data
