#pragma once
// Note [Zero-copy host residency]
// With host residency, a contiguous, uncompressed dataset whose file dtype is the resident
// dtype is not copied: the rank maps its rows of the file read-only (mmap, populated from the
// page cache, locked in memory when RLIMIT_MEMLOCK allows) and the resident tensor points into
// the mapping (data.host_mmap, on by default). Loading is then as fast as the page cache, and
// a warm file costs its memory once instead of twice (page cache + copy). Everything else
// (device residency, chunked or compressed datasets, dtype conversion, bf16) is read through
// the (collective) reader. Whether a dataset is mapped depends only on the file and the config,
// so all ranks skip the same collective reads.
//
// A mapped file must not be truncated or rewritten in place while a run uses it (write a new
// file and rename it over the old one instead): the next access to a vanished page raises
// SIGBUS, which megabatch turns into a message and exit code 3.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/Hdf5.h"

namespace mb::data {

// The file offset of a dataset's raw data if it can be mapped as `type`: contiguous layout,
// no filters, allocated, a file dtype identical to `type`'s native HDF5 type, and an offset
// aligned to the element size.
std::optional<std::uint64_t> mappableOffset(hid_t file, const std::string& dataset,
                                            at::ScalarType type);

struct Mapping {
  at::Tensor tensor;    // [shape], read-only memory: never write to it
  bool locked = false;  // mlock succeeded
};

// Maps `bytes` of `path` starting at `offset` as a tensor of `shape` and `type` (CPU).
Mapping mapRows(const std::string& path, std::uint64_t offset,
                const std::vector<std::int64_t>& shape, at::ScalarType type);

}  // namespace mb::data
