#pragma once
// Resident data of one contiguous sample range, and the gathers that build batches from it.
//
// Note [Window gather]
// A series store keeps, per stream, the stream's rows that its samples' windows cover
// ([T_s, F_s], once) and each sample's end row relative to them ([n] int32). A batch of
// sample positions `local` [B] becomes, per stream,
//   rows   = ends[local] - (window - 1) + arange(window)   // [B, window] row indices
//   inputs = values.index_select(0, rows.flatten()).view(B, window, F)
// on whatever device the store lives: a window costs memory only inside the batch, never per
// sample (DESIGN.md "Data lives on the GPU"). Tokens work the same way with rows
// local*context + arange(context + 1) of the token array.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "data/Batch.h"
#include "data/DataInfo.h"
#include "data/GlobalOrder.h"
#include "data/Schema.h"

namespace mb::data {

// What a dataset holds for the loader.
enum class Role { kFeatures, kTargets, kTokens, kEnds, kValues };

// One dataset read of a store: rows [rows.begin, rows.end) of `path`, resident as `type`.
struct ReadSpec {
  Role role = Role::kFeatures;
  std::size_t stream = 0;            // series: index into FileSchema::streams
  std::string path;                  // dataset inside the file
  ItemRange rows;                    // rows of the dataset
  std::vector<std::int64_t> shape;   // resident shape: [rows.size(), ...]
  at::ScalarType type = at::kFloat;  // resident dtype
  std::int64_t bytes() const;
};

// Everything one store reads, in a fixed order (equal on every rank, so collective reads
// line up): samples: features, targets; series: ends per stream, values per stream, targets;
// tokens: tokens.
struct StorePlan {
  SampleRange samples;
  std::vector<ReadSpec> reads;
  std::int64_t bytes() const;
};

// Series planning needs the end row of a sample in a stream.
using EndRow = std::function<std::int64_t(std::size_t stream, std::int64_t sample)>;

StorePlan planStore(const FileSchema& schema, SampleRange samples, DType residentDtype,
                    const EndRow& endRow);

// Checks the values a rank loaded (non-finite features/values/targets, negative labels,
// tokens outside [0, vocab_size)). Throws DataError naming the dataset and the first bad
// sample or row in the file's numbering. `tensors` follow plan.reads.
void checkValues(const FileSchema& schema, const StorePlan& plan,
                 const std::vector<at::Tensor>& tensors);

class Store {
 public:
  Store() = default;
  // `tensors` follow plan.reads and live on one device; series ends are rebased here.
  Store(const FileSchema& schema, const StorePlan& plan, std::vector<at::Tensor> tensors);

  const SampleRange& samples() const { return samples_; }
  std::int64_t bytes() const { return bytes_; }
  c10::Device device() const { return device_; }

  // Samples at positions `local` ([B] int64 in [0, samples().size()), on device()).
  Batch gather(const at::Tensor& local, at::ScalarType inputType) const;
  // Samples [begin, end) of the store.
  Batch slice(std::int64_t begin, std::int64_t end, at::ScalarType inputType) const;
  // Largest target label in the store (classification), -1 if empty.
  std::int64_t maxLabel() const;

 private:
  Layout layout_ = Layout::kSamples;
  SampleRange samples_;
  c10::Device device_{c10::kCPU};
  std::int64_t bytes_ = 0;
  std::int64_t context_ = 0;
  at::Tensor features_;             // samples: [n, T, F] or [n, F]; tokens: [n*context + 1]
  std::vector<at::Tensor> values_;  // series: [rows_s, F_s] per stream
  std::vector<at::Tensor> ends_;    // series: [n] int32 (int64 past 2^31 rows) rows into values_[s]
  std::vector<std::int64_t> windows_;  // series: window per stream
  at::Tensor targets_;                 // [n] / [n, K] float32, or [n] int64 labels
};

}  // namespace mb::data
