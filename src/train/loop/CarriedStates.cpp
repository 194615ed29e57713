#include "train/loop/CarriedStates.h"

#include <algorithm>

#include <ATen/Functions.h>

#include "common/Log.h"
#include "data/ShardedData.h"
#include "dist/Communicator.h"

namespace mb::train {

CarriedStates::CarriedStates(model::Model& model, const data::ShardedData& data,
                             dist::Communicator& dataComm)
    : model_(model::capability<model::StatefulLanes>(model)),
      data_(data),
      dataComm_(dataComm),
      count_(model_ != nullptr ? data.order().numLanes() : 0) {
  if (model_ != nullptr) model_->setLaneCount(count_);  // before any state is broadcast
}

void CarriedStates::describe() const {
  if (count_ == 0) return;
  const data::LaneSpec& lanes = data_.order().lanes();
  log::get("train").info(
      "stateful lanes: {} ({} canonical shards x {}), stride {}: an epoch is {} pass(es) of "
      "one item per lane per step; lane states restart at each pass",
      count_, data_.order().numShards(), lanes.lanesPerShard, lanes.stride, lanes.stride);
}

void CarriedStates::beforeBatch(std::int64_t batchInEpoch) {
  if (count_ > 0 && data_.order().laneStep(batchInEpoch).step == 0) restart();
}

// Every step: the copies are kept and refilled, not allocated again.
void CarriedStates::keepStepStart() {
  if (count_ == 0) return;
  NamedTensors now = model_->extraState();
  const bool sameShapes =
      now.size() == stepStart_.size() &&
      std::equal(now.begin(), now.end(), stepStart_.begin(), [](const auto& a, const auto& b) {
        return a.first == b.first && a.second.sizes() == b.second.sizes();
      });
  if (!sameShapes) {
    stepStart_ = std::move(now);
    for (auto& [name, state] : stepStart_)
      state = state.clone();
    return;
  }
  for (std::size_t i = 0; i < now.size(); ++i)
    stepStart_[i].second.copy_(now[i].second);
}

void CarriedStates::backToStepStart() {
  if (count_ > 0) model_->loadExtraState(stepStart_);
}

void CarriedStates::restart() {
  model_->resetState();
  model_->setLaneCount(count_);
}

// Every rank holds all lanes' states but advances only its own, so the others are zero, or
// stale copies broadcast at a resume. Each rank therefore contributes just its own lanes to a
// sum, which leaves the full set everywhere without double counting; the model's own states
// stay as they are.
NamedTensors CarriedStates::gather() {
  if (model_ == nullptr) return {};
  NamedTensors states = model_->extraState();
  if (count_ == 0) return states;
  data::ItemRange own = data_.order().lanesOfShards(data::GlobalOrder::shardsOfRank(
      data_.order().numShards(), dataComm_.rank(), dataComm_.size()));
  for (auto& [name, state] : states) {
    at::Tensor sum = at::zeros_like(state);  // [layers, lanes, hidden]
    sum.narrow(1, own.begin, own.size()).copy_(state.narrow(1, own.begin, own.size()));
    dataComm_.allReduce(sum, dist::ReduceOp::kSum, "lane state " + name);
    state = sum;
  }
  return states;
}

void CarriedStates::loadOnRoot(const NamedTensors& extra) {
  if (model_ == nullptr) return;
  model_->loadExtraState(extra);
  model_->setLaneCount(count_);  // a loaded lane count must match the run's
}

void CarriedStates::broadcastFromRoot() {
  if (model_ == nullptr) return;
  NamedTensors states = model_->extraState();
  for (auto& [name, tensor] : states)
    dataComm_.broadcast(tensor, 0, "extra state " + name);
  if (dataComm_.rank() != 0) model_->loadExtraState(states);
}

}  // namespace mb::train
