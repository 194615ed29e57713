#include "data/pipeline/ChunkStreamer.h"

#include <algorithm>
#include <set>

#include <ATen/Functions.h>

#include "data/pipeline/Reader.h"

namespace mb::data {
namespace {

std::int64_t chunkItemsOf(const GlobalOrder& order) {
  return order.chunkItems() > 0 ? order.chunkItems() : std::max<std::int64_t>(1, order.numItems());
}

// Puts `part` (rows for `positions` of a batch) into `out` ([count, ...]), allocating it.
void place(at::Tensor& out, const at::Tensor& part, const at::Tensor& positions,
           std::int64_t count) {
  if (!out.defined()) {
    std::vector<std::int64_t> shape(part.sizes().begin(), part.sizes().end());
    shape[0] = count;
    out = at::empty(shape, part.options());
  }
  out.index_copy_(0, positions, part);
}

}  // namespace

ChunkStreamer::ChunkStreamer(std::shared_ptr<const Layout> layout, SampleRange trainSplit,
                             DType residentDtype, c10::Device device, const GlobalOrder& order,
                             ShardRange shards)
    : layout_(std::move(layout)),
      trainSplit_(trainSplit),
      residentDtype_(residentDtype),
      device_(device),
      order_(order),
      shards_(shards) {
  std::int64_t chunkItems = chunkItemsOf(order);
  for (std::int64_t s = shards.begin; s < shards.end; ++s) {
    firstChunkOfShard_.push_back(static_cast<std::int64_t>(chunks_.size()));
    ItemRange items = order.shardItems(s);
    for (std::int64_t first = items.begin; first < items.end; first += chunkItems) {
      std::int64_t last = std::min(items.end, first + chunkItems);
      chunks_.push_back({{trainSplit.begin + first, trainSplit.begin + last}, first});
    }
  }
  // Shapes for empty shares: a store of no samples holds tensors of no rows.
  IndexReader noFile(-1, layout_->path());  // an empty plan reads no index rows
  StorePlan none = layout_->planStore({0, 0}, residentDtype, noFile);
  std::vector<at::Tensor> tensors;
  for (const auto& read : none.reads)
    tensors.push_back(at::empty(read.shape, at::TensorOptions().dtype(read.type).device(device)));
  empty_ = Store(layout_, none, std::move(tensors));
  thread_ = std::thread([this] { loaderLoop(); });
}

ChunkStreamer::~ChunkStreamer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::recursive_mutex> h5lock(h5::libraryMutex());
  index_.reset();
  file_.reset();
}

std::int64_t ChunkStreamer::capacityBound(const GlobalOrder& order, ShardRange shards) {
  std::int64_t owned = shards.end - shards.begin;
  std::int64_t perShardPerBatch = (order.globalBatch() + order.numShards() - 1) / order.numShards();
  std::int64_t chunkItems = chunkItemsOf(order);
  std::int64_t neededPerShard = (perShardPerBatch + chunkItems - 1) / chunkItems + 1;
  std::int64_t chunksOwned = 0;
  for (std::int64_t s = shards.begin; s < shards.end; ++s)
    chunksOwned += (order.shardItems(s).size() + chunkItems - 1) / chunkItems;
  return std::min(chunksOwned, owned * (neededPerShard + 1));
}

std::int64_t ChunkStreamer::chunkOf(std::int64_t item) const {
  // Own shards are contiguous: find the shard by its first item.
  std::int64_t low = shards_.begin, high = shards_.end - 1;
  while (low < high) {
    std::int64_t mid = (low + high + 1) / 2;
    if (order_.shardItems(mid).begin <= item) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  std::int64_t within = item - order_.shardItems(low).begin;
  return firstChunkOfShard_[low - shards_.begin] + within / chunkItemsOf(order_);
}

void ChunkStreamer::beginEpoch(const GlobalOrder::Share& share) {
  std::size_t n = share.items.size();
  std::vector<std::int64_t> chunkOf(n), localOf(n), lastBatch(chunks_.size(), -1), schedule;
  std::vector<bool> scheduled(chunks_.size(), false);
  std::int64_t maxNeeded = 1;
  for (std::size_t b = 0; b + 1 < share.offsets.size(); ++b) {
    std::set<std::int64_t> needed;
    for (std::int64_t p = share.offsets[b]; p < share.offsets[b + 1]; ++p) {
      std::int64_t id = this->chunkOf(share.items[p]);
      chunkOf[p] = id;
      localOf[p] = share.items[p] - chunks_[id].firstItem;
      lastBatch[id] = static_cast<std::int64_t>(b);
      needed.insert(id);
      if (!scheduled[id]) {
        scheduled[id] = true;
        schedule.push_back(id);
      }
    }
    maxNeeded = std::max<std::int64_t>(maxNeeded, static_cast<std::int64_t>(needed.size()));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    share_ = &share;
    chunkOfPosition_ = std::move(chunkOf);
    localOfPosition_ = std::move(localOf);
    lastBatch_ = std::move(lastBatch);
    schedule_ = std::move(schedule);
    capacity_ = std::min<std::int64_t>(static_cast<std::int64_t>(chunks_.size()),
                                       maxNeeded + (shards_.end - shards_.begin));
    ++generation_;
    cursor_ = 0;
    consumerBatch_ = 0;
    resident_.clear();
    error_.reset();
  }
  changed_.notify_all();
}

void ChunkStreamer::loaderLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] {
      return stop_ || (!error_ && cursor_ < schedule_.size() &&
                       static_cast<std::int64_t>(resident_.size()) < capacity_);
    });
    if (stop_) return;
    std::int64_t id = schedule_[cursor_++];
    if (lastBatch_[id] < consumerBatch_ || resident_.count(id)) continue;
    std::uint64_t generation = generation_;
    Chunk chunk = chunks_[id];
    lock.unlock();
    std::shared_ptr<Store> store;
    std::optional<Error> failure;
    try {
      store = loadChunk(chunk);
    } catch (const Error& e) {
      failure = e;
    } catch (const std::exception& e) {
      failure = RuntimeError(layout_->path() + ": streaming a chunk failed: " + e.what());
    }
    lock.lock();
    if (generation != generation_) continue;  // the epoch restarted meanwhile
    if (failure) {
      error_ = failure;
    } else {
      resident_[id] = std::move(store);
    }
    changed_.notify_all();
  }
}

std::shared_ptr<Store> ChunkStreamer::loadChunk(const Chunk& chunk) {
  StorePlan plan;
  std::vector<at::Tensor> tensors;
  bool pinned = device_.is_cuda();
  {
    std::lock_guard<std::recursive_mutex> h5lock(h5::libraryMutex());
    if (!file_.valid()) {
      file_ = h5::openFile(layout_->path(), false, ExitCode::kData);
      index_ = std::make_unique<IndexReader>(file_.get(), layout_->path());
    }
    plan = layout_->planStore(chunk.samples, residentDtype_, *index_);
    RowReader reader(file_.get(), H5P_DEFAULT, /*collective=*/false);
    for (const auto& read : plan.reads) {
      at::Tensor t =
          at::empty(read.shape, at::TensorOptions().dtype(read.type).pinned_memory(pinned));
      reader.read(read.path, {read.rows}, 0, t, read.axis);
      tensors.push_back(t);
    }
    reader.throwIfFailed();
  }
  layout_->checkValues(plan, tensors);
  if (!device_.is_cpu()) {
    for (auto& t : tensors)
      t = t.to(device_);  // blocking: the chunk is complete when handed over
  }
  return std::make_shared<Store>(layout_, plan, std::move(tensors));
}

Batch ChunkStreamer::gather(std::int64_t batch, std::int64_t begin, std::int64_t end,
                            at::ScalarType inputType) {
  std::unique_lock<std::mutex> lock(mutex_);
  std::int64_t first = share_->offsets.at(batch) + begin;
  std::int64_t count = end - begin;
  if (batch < consumerBatch_) {  // going back: restart the schedule from this batch
    ++generation_;
    cursor_ = 0;
    resident_.clear();
  }
  consumerBatch_ = batch;
  for (auto it = resident_.begin(); it != resident_.end();) {
    it = lastBatch_[it->first] < batch ? resident_.erase(it) : std::next(it);
  }
  changed_.notify_all();
  if (count == 0)
    return empty_.gather(
        at::empty({0}, at::TensorOptions().dtype(at::kLong).device(empty_.device())), inputType);

  // Positions of this slice grouped by chunk.
  std::map<std::int64_t, std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> groups;
  for (std::int64_t p = first; p < first + count; ++p) {
    auto& group = groups[chunkOfPosition_[p]];
    group.first.push_back(p - first);
    group.second.push_back(localOfPosition_[p]);
  }
  changed_.wait(lock, [&] {
    if (error_) return true;
    for (const auto& entry : groups) {
      if (!resident_.count(entry.first)) return false;
    }
    return true;
  });
  if (error_) throw *error_;
  std::vector<std::shared_ptr<Store>> stores;
  for (const auto& entry : groups)
    stores.push_back(resident_.at(entry.first));
  lock.unlock();

  auto indexOptions = at::TensorOptions().dtype(at::kLong);
  Batch out;
  std::size_t g = 0;
  for (const auto& entry : groups) {
    const Store& store = *stores[g++];
    at::Tensor local = at::tensor(entry.second.second, indexOptions).to(store.device());
    Batch part = store.gather(local, inputType);
    if (groups.size() == 1) return part;  // positions 0..count-1 in order
    at::Tensor positions = at::tensor(entry.second.first, indexOptions).to(store.device());
    out.inputs.resize(part.inputs.size());
    for (std::size_t i = 0; i < part.inputs.size(); ++i)
      place(out.inputs[i], part.inputs[i], positions, count);
    place(out.targets, part.targets, positions, count);
    place(out.sampleIndex, part.sampleIndex, positions, count);
  }
  return out;
}

std::int64_t ChunkStreamer::residentBytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::int64_t total = 0;
  for (const auto& entry : resident_)
    total += entry.second->bytes();
  return total;
}

std::int64_t ChunkStreamer::capacity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return capacity_;
}

}  // namespace mb::data
