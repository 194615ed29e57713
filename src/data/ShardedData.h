#pragma once
// The "mega-batch" loader: one rank's resident share of a time-ordered HDF5 dataset.
//
// load() is collective over the control communicator. Every rank validates the file's
// schema (agreeing on errors: exit code 3 on every rank), derives the splits and the
// canonical shards, and reads its contiguous range once (parallel HDF5, collective
// transfers) into memory on `device` (residency device/host) or streams it in canonical
// chunks on a background thread (residency stream). After load() the step loop never
// touches the disk (stream mode: only the prefetch thread does).
//
// Train batches follow GlobalOrder (Note [Canonical global order]); eval batches come from
// this rank's contiguous part of the val or test split. Batches are gathered on the device
// by index arithmetic: a series window is a gather of rows end-window+1..end from the
// resident stream, never a materialised copy per sample.
#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "config/Config.h"
#include "data/Batch.h"
#include "data/DataInfo.h"
#include "data/pipeline/GlobalOrder.h"

namespace mb::dist {
class Communicator;
}

namespace mb::data {

// What load() did on this rank, for logs, `megabatch data check`, and benchmarks.
struct LoadStats {
  Residency residency = Residency::kHost;  // resolved (never kAuto)
  std::string io;                          // "MPI-IO, collective transfers" / "sec2, ..."
  double validateSeconds = 0;              // schema, index arrays, planning
  double readSeconds = 0;        // the (collective) reads and mappings of this rank's rows
  double checkSeconds = 0;       // value checks (non-finite, labels, tokens)
  double identifySeconds = 0;    // the data identity (hashing, and the rows no rank holds)
  std::int64_t bytesRead = 0;    // resident bytes read by this rank
  std::int64_t bytesMapped = 0;  // resident bytes mapped from the page cache (host_mmap)
  std::int64_t bytesKept = 0;    // resident bytes kept from the load before (a walk's folds)
  std::int64_t budgetBytes = 0;  // memory budget this rank was checked against
  std::string budget;            // how the budget was derived
};

// Whether a load records the data's identity in info().identityYaml (Note [Data continuity]).
// Recording hashes every row and reads the rows no rank holds once more, so only what needs
// it asks: training (its checkpoints, its resumes) and `megabatch data check`.
enum class Identity { kSkip, kRecord };

class ShardedData {
 public:
  virtual ~ShardedData() = default;

  // Collective. Throws (agreed on every rank) DataError (exit 3) for bad input, including a
  // train split with fewer samples than V; ConfigError (exit 2) for V < world size and for
  // resident data over the memory budget (docs/data-format.md "Errors").
  static std::unique_ptr<ShardedData> load(const Config& config, dist::Communicator& control,
                                           c10::Device device, Identity identity = Identity::kSkip);

  virtual const DataInfo& info() const = 0;
  virtual const GlobalOrder& order() const = 0;

  // --- train ---
  // Prepares epoch `epoch`: this rank's share of every global batch, uploaded to the device
  // once per epoch (so a step only slices it).
  virtual void beginEpoch(std::int64_t epoch) = 0;
  virtual std::int64_t batchesPerEpoch() const = 0;
  // This rank's items in global batch `batch` of the current epoch (may be 0).
  virtual std::int64_t localCount(std::int64_t batch) const = 0;
  // All ranks' items in that batch (what the loss is normalised by).
  virtual std::int64_t globalCount(std::int64_t batch) const = 0;
  // Items [begin, end) of this rank's share of global batch `batch`, gathered on the device.
  // Inputs are cast to `inputType`. Every caller asks for fp32, bf16 runs included: reduced
  // precision is autocast's, inside the model (Note [LSTM precision]), and data stored as bf16
  // is cast up here.
  virtual Batch trainBatch(std::int64_t batch, std::int64_t begin, std::int64_t end,
                           at::ScalarType inputType) = 0;

  // --- eval ---
  // This rank's samples of `split` (a contiguous part of it; empty parts are allowed). For
  // kTrain: this rank's train items in time order (resident residency only; `predict` uses it).
  virtual std::int64_t evalCount(Split split) const = 0;
  virtual Batch evalBatch(Split split, std::int64_t begin, std::int64_t end,
                          at::ScalarType inputType) = 0;
  // The `count` samples of this rank's `split` that take the most memory in a forward pass (the
  // most nodes and edges of graphs, instruments of a panel), for the memory plan's trial.
  virtual Batch heaviestBatch(Split split, std::int64_t count, at::ScalarType inputType) = 0;

  // Bytes held resident for this rank (features + targets + indices), for logs and tests.
  // Stream residency: the val/test parts plus the chunks resident now.
  virtual std::int64_t residentBytes() const = 0;
  virtual LoadStats loadStats() const { return {}; }
};

}  // namespace mb::data
