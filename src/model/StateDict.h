#pragma once
// A model's state_dict in HDF5: one dataset per entry, named exactly as PyTorch's
// Module.state_dict() names it (`encoders.m5.weight_ih_l0`, `transformer.h.0.ln_1.weight`;
// flat in the group, the dots are part of the name), float32 with Fletcher32 checksums, so
// that Python loads it by name into an equal torch.nn module:
//   sd = {k: torch.from_numpy(v[()]) for k, v in h5py.File(path)["model"].items()}
//   module.load_state_dict(sd)   # strict
// Tied weights appear under both names, as in PyTorch (Model::tiedWeights()).
#include <cstdint>

#include <hdf5.h>

#include "model/Model.h"

namespace mb::model {

// Parameters and buffers in registration order, then the tied aliases.
NamedTensors stateDict(const Model& model);

// Writes every state_dict entry as a dataset below `group` (an open HDF5 group, e.g. the
// checkpoint's /model). Floating tensors are stored as float32. Throws CheckpointError.
void writeStateDict(const Model& model, hid_t group);

// Loads every parameter and buffer of `model` from the datasets below `group`, by name,
// converting to each tensor's dtype and device. Throws CheckpointError naming the file and
// group when a name is missing or unexpected, a shape differs, or a tied alias disagrees with
// its source. A tied alias may be absent (tools that de-duplicate tied weights drop it).
void loadStateDict(Model& model, hid_t group);

}  // namespace mb::model
