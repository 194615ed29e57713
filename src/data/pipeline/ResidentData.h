#pragma once
// The ShardedData implementations behind ShardedData::load (internal to src/data):
//  - ResidentData: the whole train part resident (residency device, or host);
//  - StreamingData: train chunks streamed by a ChunkStreamer (residency stream).
// Both hold this rank's val and test parts resident and share the epoch bookkeeping.
#include <memory>

#include "data/ShardedData.h"
#include "data/pipeline/ChunkStreamer.h"
#include "data/pipeline/Store.h"

namespace mb::data::detail {

class LoadedData : public ShardedData {
 public:
  LoadedData(DataInfo info, GlobalOrder order, c10::Device device, ShardRange shards, Store val,
             Store test, LoadStats stats);

  const DataInfo& info() const override { return info_; }
  const GlobalOrder& order() const override { return order_; }
  std::int64_t batchesPerEpoch() const override { return order_.batchesPerEpoch(); }
  std::int64_t localCount(std::int64_t batch) const override;
  std::int64_t globalCount(std::int64_t batch) const override;
  std::int64_t evalCount(Split split) const override;
  Batch evalBatch(Split split, std::int64_t begin, std::int64_t end,
                  at::ScalarType inputType) override;
  Batch heaviestBatch(Split split, std::int64_t count, at::ScalarType inputType) override;
  LoadStats loadStats() const override { return stats_; }

 protected:
  // The resident train store, or nullptr when the train split is streamed.
  virtual const Store* trainStore() const { return nullptr; }
  const Store& evalStore(Split split) const;
  // Computes this rank's share of epoch `epoch`.
  void computeShare(std::int64_t epoch);
  // Position in the share of item `begin` of batch `batch`; checks the arguments.
  std::int64_t sharePosition(std::int64_t batch, std::int64_t begin, std::int64_t end) const;
  // Moves a batch gathered on the store's device to the training device (host residency on
  // CUDA: through pinned memory, asynchronously).
  Batch toDevice(Batch batch) const;
  // The file's sample indices of share positions [position, position + count).
  std::vector<std::int64_t> shareSamples(std::int64_t position, std::int64_t count) const;
  std::int64_t evalBytes() const { return val_.bytes() + test_.bytes(); }

  DataInfo info_;
  GlobalOrder order_;
  c10::Device device_;
  ShardRange shards_;
  ItemRange items_;  // this rank's train items (0-based in the train split)
  Store val_;
  Store test_;
  LoadStats stats_;
  GlobalOrder::Share share_;
  std::int64_t epoch_ = -1;
};

class ResidentData final : public LoadedData {
 public:
  ResidentData(DataInfo info, GlobalOrder order, c10::Device device, ShardRange shards, Store train,
               Store val, Store test, LoadStats stats);
  void beginEpoch(std::int64_t epoch) override;
  Batch trainBatch(std::int64_t batch, std::int64_t begin, std::int64_t end,
                   at::ScalarType inputType) override;
  std::int64_t residentBytes() const override;

 private:
  const Store* trainStore() const override { return &train_; }
  Store train_;
  at::Tensor shareLocal_;  // [share items] positions within train_, on its device
  at::Tensor shareLanes_;  // [share items] global lane ids on the training device (lane order)
};

class StreamingData final : public LoadedData {
 public:
  StreamingData(DataInfo info, GlobalOrder order, c10::Device device, ShardRange shards,
                std::unique_ptr<ChunkStreamer> streamer, Store val, Store test, LoadStats stats);
  ~StreamingData() override;
  void beginEpoch(std::int64_t epoch) override;
  Batch trainBatch(std::int64_t batch, std::int64_t begin, std::int64_t end,
                   at::ScalarType inputType) override;
  std::int64_t residentBytes() const override;

 private:
  std::unique_ptr<ChunkStreamer> streamer_;
};

}  // namespace mb::data::detail
