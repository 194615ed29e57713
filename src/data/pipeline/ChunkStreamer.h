#pragma once
// Note [Stream residency]
// For train data larger than memory, a rank keeps only a few chunks of its shards resident.
// A chunk is chunkItems consecutive items of one canonical shard (GlobalOrder's chunkItems, so
// chunk boundaries are canonical and the order never depends on W). GlobalOrder visits a shard
// chunk by chunk, so a chunk is needed by a contiguous run of global batches.
//
// A background thread loads chunks in the order the epoch first needs them, with serial HDF5
// (holding h5::libraryMutex() for every HDF5 call; while a streaming ShardedData exists, every
// other thread that calls HDF5, the main thread included, must hold it too), checks their
// values, and moves them to the
// store device (a blocking copy on the loader thread). At most `capacity` chunks are resident:
// the largest number any one batch needs, plus one per shard for the chunk after (double
// buffering). gather(b, ...) evicts chunks whose last batch is before b, waits until b's
// chunks are resident, and gathers from each. Going back to an earlier batch restarts the
// schedule (resume, re-run). A load failure is rethrown from gather() on this rank only: it is
// not agreed with other ranks, so the process ends the job (docs/data-format.md "Errors").
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "data/Batch.h"
#include "data/Layout.h"
#include "data/pipeline/GlobalOrder.h"
#include "data/pipeline/Store.h"

namespace mb::data {

class ChunkStreamer {
 public:
  ChunkStreamer(std::shared_ptr<const Layout> layout, SampleRange trainSplit, DType residentDtype,
                c10::Device device, const GlobalOrder& order, ShardRange shards);
  ~ChunkStreamer();
  ChunkStreamer(const ChunkStreamer&) = delete;
  ChunkStreamer& operator=(const ChunkStreamer&) = delete;

  // Starts streaming the chunks of `share` (this rank's share of one epoch).
  void beginEpoch(const GlobalOrder::Share& share);
  // Positions [begin, end) of the share's batch `batch`, gathered from their chunks.
  Batch gather(std::int64_t batch, std::int64_t begin, std::int64_t end, at::ScalarType inputType);
  std::int64_t residentBytes() const;
  std::int64_t capacity() const;

  // Upper bound of the chunks a rank holds at once, for the memory check before loading.
  static std::int64_t capacityBound(const GlobalOrder& order, ShardRange shards);

 private:
  struct Chunk {
    SampleRange samples;  // in the file's numbering
    std::int64_t firstItem = 0;
  };
  void loaderLoop();
  std::shared_ptr<Store> loadChunk(const Chunk& chunk);
  std::int64_t chunkOf(std::int64_t item) const;

  std::shared_ptr<const Layout> layout_;
  SampleRange trainSplit_;
  DType residentDtype_;
  c10::Device device_;
  GlobalOrder order_;
  ShardRange shards_;
  std::vector<Chunk> chunks_;
  std::vector<std::int64_t> firstChunkOfShard_;  // [shard - shards.begin]
  Store empty_;                                  // no samples: the shapes of an empty batch

  // Epoch state (written by beginEpoch under mutex_).
  const GlobalOrder::Share* share_ = nullptr;
  std::vector<std::int64_t> chunkOfPosition_;  // [share position] -> chunk id
  std::vector<std::int64_t> localOfPosition_;  // [share position] -> sample within the chunk
  std::vector<std::int64_t> lastBatch_;        // [chunk id] -> last batch that needs it (-1: none)
  std::vector<std::int64_t> schedule_;         // chunk ids in order of first need

  // Loader state, guarded by mutex_.
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t generation_ = 0;
  std::size_t cursor_ = 0;
  std::int64_t consumerBatch_ = 0;
  std::int64_t capacity_ = 1;
  std::map<std::int64_t, std::shared_ptr<Store>> resident_;
  std::optional<Error> error_;
  bool stop_ = false;

  // Loader thread only (and the destructor, after join).
  h5::Handle file_;
  std::unique_ptr<IndexReader> index_;
  std::thread thread_;
};

}  // namespace mb::data
