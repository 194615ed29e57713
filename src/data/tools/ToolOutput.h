#pragma once
// Output helpers shared by the dataset tools (`megabatch data ...`, src/data/tools/Tools.h): the
// --compression / --chunk-rows / --dtype options and text columns, checked the same way by
// every tool.
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/Hdf5.h"
#include "data/tools/Tools.h"

namespace mb::data {

// --compression none|gzip and --chunk-rows >= 0 as HDF5 write options (ConfigError otherwise).
h5::WriteOptions writeOptions(const WriteSettings& write);

// --dtype float16|float32|float64 (ConfigError otherwise).
at::ScalarType valueType(const std::string& dtype);

// Strings as a [rows, width] uint8 tensor, NUL padded (h5py reads it as bytes rows).
at::Tensor textRows(const std::vector<std::string>& rows);

}  // namespace mb::data
