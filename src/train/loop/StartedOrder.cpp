#include "train/loop/StartedOrder.h"

#include <ATen/Functions.h>

#include "common/Log.h"
#include "config/ConfigLoader.h"
#include "dist/Agreement.h"
#include "dist/Communicator.h"

namespace mb::train {
namespace {

void keep(const char* key, std::int64_t& configValue, std::int64_t started) {
  if (configValue != started)
    log::get("train").warn(
        "{} = {} in the config, but the run was started with {}: keeping {} so the data order "
        "continues exactly",
        key, configValue, started, started);
  configValue = started;
}

// The lane order a stateful run was started with, from rank 0's checkpoint config, on every
// rank; {-1, -1} when the run was not stateful or this one is not.
std::pair<std::int64_t, std::int64_t> startedLaneOrder(
    const Config& config, const std::optional<CheckpointContent>& resumed,
    dist::Communicator& control) {
  at::Tensor order = at::full({2}, -1, at::kLong);  // model.lanes, model.lane_stride
  if (!config.model.stateful) return {-1, -1};      // the same config on every rank
  dist::agreed(control, "reading the lane order of the checkpoint", [&] {
    if (control.rank() != 0 || !resumed) return;
    Config started = parseConfig(resumed->configYaml, "the checkpoint's /meta config");
    if (!started.model.stateful) return;
    order[0] = started.model.lanes;
    order[1] = started.model.laneStride;
  });
  control.broadcast(order, 0, "lane order");
  return {order[0].item<std::int64_t>(), order[1].item<std::int64_t>()};
}

}  // namespace

void keepStartedOrder(Config& config, TrainerState& state,
                      const std::optional<CheckpointContent>& resumed,
                      dist::Communicator& control) {
  if (!resumed) {
    state.canonicalShards = config.data.canonicalShards;
    state.seed = config.train.seed;
    state.globalBatch = config.train.globalBatch;
  } else {
    keep("data.canonical_shards", config.data.canonicalShards, state.canonicalShards);
    keep("train.seed", config.train.seed, state.seed);
    keep("train.global_batch", config.train.globalBatch, state.globalBatch);
  }
  const auto [lanes, stride] = startedLaneOrder(config, resumed, control);
  if (stride <= 0) return;  // a new run, or one started without stateful lanes
  keep("model.lanes", config.model.lanes, lanes);
  keep("model.lane_stride", config.model.laneStride, stride);
}

}  // namespace mb::train
