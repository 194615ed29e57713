#pragma once
// What one resident store reads from the file: the layout plans it (Layout::planStore), the
// shared loader reads it (collectively, or chunk by chunk when streaming) and checks its memory.
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

#include "data/DataInfo.h"
#include "data/pipeline/GlobalOrder.h"

namespace mb::data {

// What a read holds, for the value checks and the store.
enum class Role {
  kInput,    // values a model input is gathered from (features, stream rows, tokens)
  kIndex,    // per-sample row indices into an input (series end rows); checked in pass 2
  kTargets,  // per-sample targets
};

// One dataset read of a store: rows [rows.begin, rows.end) of `path`, resident as `type`.
struct ReadSpec {
  Role role = Role::kInput;
  std::size_t part = 0;              // which input of the layout (series: the stream)
  std::string path;                  // dataset inside the file
  ItemRange rows;                    // rows of the dataset (along `axis`)
  std::vector<std::int64_t> shape;   // resident shape: [rows.size(), ...] (axis 1: [d0, rows, ...])
  int axis = 0;                      // the dimension `rows` run along (1: a [2, E] edge list)
  at::ScalarType type = at::kFloat;  // resident dtype
  // Rows read besides those of the store's own samples (series: a window before the first
  // end row). A streamed chunk holds them too: the memory check counts them per chunk.
  std::int64_t haloRows = 0;
  std::int64_t bytes() const;
};

// Everything one store reads, in a fixed order (equal on every rank, so collective reads
// line up). The layout decides the order; the store's tensors follow it.
struct StorePlan {
  SampleRange samples;
  std::vector<ReadSpec> reads;
  std::int64_t bytes() const;
};

// `dims` with its first dimension replaced by `rows` (a resident shape).
std::vector<std::int64_t> withRows(std::int64_t rows, const std::vector<std::int64_t>& dims);

// The resident floating type for data.resident_dtype.
at::ScalarType residentFloatType(DType residentDtype);

}  // namespace mb::data
