#pragma once
// The trainer's side of stateful lanes (Note [Stateful lanes] in model/kinds/Lstm.h, Note [Lane
// order] in data/pipeline/GlobalOrder.h): sizing the carried states, restarting them at every
// pass of the lane order, gathering them for a checkpoint and restoring them at a resume. For a
// model without the StatefulLanes capability, or an order without lanes, every call is a no-op,
// so the trainer calls them without asking (and without knowing about lanes: to it they are the
// states a model carries from step to step).
#include <cstdint>

#include "model/Model.h"
#include "train/checkpoints/Checkpoint.h"

namespace mb::data {
class ShardedData;
}
namespace mb::dist {
class Communicator;
}

namespace mb::train {

class CarriedStates {
 public:
  // Sizes the model's carried states to every lane of the run, alike on every rank.
  CarriedStates(model::Model& model, const data::ShardedData& data, dist::Communicator& dataComm);

  std::int64_t count() const { return count_; }  // 0: none
  void describe() const;                         // one log line, when there are lanes
  // Before global batch `batchInEpoch` runs: a new pass of the lane order jumps back in time
  // (batch 0 starts pass 0 of an epoch), so the carried states restart.
  void beforeBatch(std::int64_t batchInEpoch);
  // A copy of the states as a step starts, put back when the step is dropped (Note [Stopping
  // within seconds] in Signals.cpp): its micro-batches moved the lanes they ran.
  void keepStepStart();
  void backToStepStart();
  // Every lane's state, assembled from each rank's own lanes (collective): what a checkpoint
  // stores under /extra.
  NamedTensors gather();
  // Rank 0, after loading a checkpoint's tensors: its carried states, checked against the run.
  void loadOnRoot(const NamedTensors& extra);
  // Rank 0's states to every rank (collective).
  void broadcastFromRoot();

 private:
  void restart();

  model::StatefulLanes* model_;  // null: the model carries nothing
  const data::ShardedData& data_;
  dist::Communicator& dataComm_;
  std::int64_t count_ = 0;
  NamedTensors stepStart_;
};

}  // namespace mb::train
