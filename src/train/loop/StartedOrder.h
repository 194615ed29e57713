#pragma once
// The global data order a run follows is fixed when it starts (DESIGN.md "Splits and global
// order"): (V, seed, global batch), and for stateful lanes (model.lanes, model.lane_stride,
// Note [Lane order]). A resumed run keeps the values it started with, whatever the config says
// now, and a warning names each key that differs.
#include <optional>

#include "config/Config.h"
#include "train/checkpoints/Checkpoint.h"
#include "train/loop/TrainerState.h"

namespace mb::dist {
class Communicator;
}

namespace mb::train {

// A new run (no `resumed`): records the config's order in `state`. A resumed one: `state` holds
// the order it started with, and `config` gets it back. Every rank calls it (collective):
// rank 0 holds the checkpoint, and the lane order comes from its stored config.
void keepStartedOrder(Config& config, TrainerState& state,
                      const std::optional<CheckpointContent>& resumed, dist::Communicator& control);

}  // namespace mb::train
