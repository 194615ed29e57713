#include "data/pipeline/ResidentData.h"

#include <ATen/Functions.h>

#include "common/Error.h"

namespace mb::data::detail {
namespace {

at::Tensor toTrainingDevice(const at::Tensor& t, c10::Device device) {
  if (!t.defined() || t.device() == device) return t;
  if (device.is_cuda() && t.device().is_cpu())
    return t.pin_memory().to(device, /*non_blocking=*/true);
  return t.to(device);
}

}  // namespace

LoadedData::LoadedData(DataInfo info, GlobalOrder order, c10::Device device, ShardRange shards,
                       Store val, Store test, LoadStats stats)
    : info_(std::move(info)),
      order_(std::move(order)),
      device_(device),
      shards_(shards),
      items_(order_.itemsOfShards(shards)),
      val_(std::move(val)),
      test_(std::move(test)),
      stats_(std::move(stats)) {}

std::int64_t LoadedData::localCount(std::int64_t batch) const {
  if (epoch_ < 0) throw RuntimeError("ShardedData: beginEpoch() was not called");
  return share_.offsets.at(batch + 1) - share_.offsets.at(batch);
}

std::int64_t LoadedData::globalCount(std::int64_t batch) const {
  return order_.batchSize(batch);
}

const Store& LoadedData::evalStore(Split split) const {
  if (split == Split::kVal) return val_;
  if (split == Split::kTest) return test_;
  if (const Store* train = trainStore()) return *train;
  throw RuntimeError("this rank's train split is streamed (data.residency = stream), not resident",
                     "use data.residency=host to read the train split in time order");
}

std::int64_t LoadedData::evalCount(Split split) const {
  return evalStore(split).samples().size();
}

Batch LoadedData::evalBatch(Split split, std::int64_t begin, std::int64_t end,
                            at::ScalarType inputType) {
  const Store& store = evalStore(split);
  if (begin < 0 || end < begin || end > store.samples().size())
    throw RuntimeError("ShardedData::evalBatch(" + std::string(toString(split)) + ", " +
                       std::to_string(begin) + ", " + std::to_string(end) + "): this rank holds " +
                       std::to_string(store.samples().size()) + " samples of that split");
  Batch batch = toDevice(store.slice(begin, end, inputType));
  for (std::int64_t i = begin; i < end; ++i)
    batch.hostSampleIndex.push_back(store.samples().begin + i);
  return batch;
}

Batch LoadedData::heaviestBatch(Split split, std::int64_t count, at::ScalarType inputType) {
  const Store& store = evalStore(split);
  if (count < 1 || count > store.samples().size())
    throw RuntimeError("ShardedData::heaviestBatch(" + std::string(toString(split)) + ", " +
                       std::to_string(count) + "): this rank holds " +
                       std::to_string(store.samples().size()) + " samples of that split");
  return toDevice(store.heaviest(count, inputType));
}

std::vector<std::int64_t> LoadedData::shareSamples(std::int64_t position,
                                                   std::int64_t count) const {
  const std::int64_t first = info_.split(Split::kTrain).begin;  // items count from the split
  std::vector<std::int64_t> samples(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i)
    samples[i] = first + share_.items[position + i];
  return samples;
}

void LoadedData::computeShare(std::int64_t epoch) {
  share_ = order_.epochShare(epoch, shards_);
  epoch_ = epoch;
}

std::int64_t LoadedData::sharePosition(std::int64_t batch, std::int64_t begin,
                                       std::int64_t end) const {
  if (epoch_ < 0) throw RuntimeError("ShardedData::trainBatch before beginEpoch()");
  if (batch < 0 || batch >= batchesPerEpoch())
    throw RuntimeError("ShardedData::trainBatch: batch " + std::to_string(batch) +
                       " of an epoch of " + std::to_string(batchesPerEpoch()));
  std::int64_t count = localCount(batch);
  if (begin < 0 || end < begin || end > count)
    throw RuntimeError("ShardedData::trainBatch: items [" + std::to_string(begin) + ", " +
                       std::to_string(end) + ") of a local share of " + std::to_string(count));
  return share_.offsets[batch] + begin;
}

Batch LoadedData::toDevice(Batch batch) const {
  for (auto& input : batch.inputs)
    input = toTrainingDevice(input, device_);
  batch.targets = toTrainingDevice(batch.targets, device_);
  batch.sampleIndex = toTrainingDevice(batch.sampleIndex, device_);
  for (at::Tensor* graph : {&batch.nodeFeatures, &batch.nodeTypes, &batch.edgeIndex,
                            &batch.edgeFeatures, &batch.nodeGraph})
    *graph = toTrainingDevice(*graph, device_);
  return batch;
}

// --- resident -------------------------------------------------------------------------

ResidentData::ResidentData(DataInfo info, GlobalOrder order, c10::Device device, ShardRange shards,
                           Store train, Store val, Store test, LoadStats stats)
    : LoadedData(std::move(info), std::move(order), device, shards, std::move(val), std::move(test),
                 std::move(stats)),
      train_(std::move(train)) {}

void ResidentData::beginEpoch(std::int64_t epoch) {
  if (epoch == epoch_) return;
  computeShare(epoch);
  // Item -> position in the resident train part, uploaded once per epoch.
  at::Tensor local =
      at::tensor(share_.items, at::TensorOptions().dtype(at::kLong)).sub_(items_.begin);
  shareLocal_ = local.to(train_.device());
  if (!share_.lanes.empty())
    shareLanes_ = at::tensor(share_.lanes, at::TensorOptions().dtype(at::kLong)).to(device_);
}

Batch ResidentData::trainBatch(std::int64_t batch, std::int64_t begin, std::int64_t end,
                               at::ScalarType inputType) {
  std::int64_t position = sharePosition(batch, begin, end);
  Batch result = toDevice(train_.gather(shareLocal_.narrow(0, position, end - begin), inputType));
  if (shareLanes_.defined()) result.lanes = shareLanes_.narrow(0, position, end - begin);
  result.hostSampleIndex = shareSamples(position, end - begin);
  return result;
}

std::int64_t ResidentData::residentBytes() const {
  std::int64_t share = shareLocal_.defined() ? shareLocal_.numel() * 8 : 0;
  if (shareLanes_.defined()) share += shareLanes_.numel() * 8;
  return train_.bytes() + evalBytes() + share;
}

// --- streaming ------------------------------------------------------------------------

StreamingData::StreamingData(DataInfo info, GlobalOrder order, c10::Device device,
                             ShardRange shards, std::unique_ptr<ChunkStreamer> streamer, Store val,
                             Store test, LoadStats stats)
    : LoadedData(std::move(info), std::move(order), device, shards, std::move(val), std::move(test),
                 std::move(stats)),
      streamer_(std::move(streamer)) {}

StreamingData::~StreamingData() {
  streamer_.reset();
}

void StreamingData::beginEpoch(std::int64_t epoch) {
  if (epoch == epoch_) return;
  computeShare(epoch);
  streamer_->beginEpoch(share_);
}

Batch StreamingData::trainBatch(std::int64_t batch, std::int64_t begin, std::int64_t end,
                                at::ScalarType inputType) {
  const std::int64_t position = sharePosition(batch, begin, end);
  Batch result = toDevice(streamer_->gather(batch, begin, end, inputType));
  result.hostSampleIndex = shareSamples(position, end - begin);
  return result;
}

std::int64_t StreamingData::residentBytes() const {
  return streamer_->residentBytes() + evalBytes();
}

}  // namespace mb::data::detail
