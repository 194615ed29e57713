#pragma once
// Note [Collective reads]
// Each rank reads its row range of a dataset straight into its resident tensor, in pieces of
// at most pieceBytes (MPI-IO transfers over 2 GiB fail on some stacks; pieces also bound the
// pinned staging memory of device uploads). With collective transfers (dist::ParallelIo),
// every rank must make the same H5Dread calls, so:
//  - the number of pieces of a read is the maximum over ranks, which every rank computes from
//    every rank's row range (all ranks know all ranges: they come from the same plan);
//  - a rank whose range has run out, or whose earlier piece failed, still calls H5Dread with
//    an empty selection. A failure is recorded, not thrown, until throwIfFailed(), which the
//    caller runs inside dist::agreed after the last collective read. No rank leaves early.
//
// Destinations: a contiguous CPU tensor of a type HDF5 converts to (float16/32/64 sources to
// float32, integers to int32/int64) is filled in place. Anything else (bf16, CUDA tensors) goes
// through a staging piece: float32 on the host (pinned when the destination is CUDA), then an
// asynchronous copy_ into the destination slice. The caching host allocator records the copy
// on the stream, so a staging buffer is reused only after its copy finished.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "data/pipeline/GlobalOrder.h"
#include "data/pipeline/RowCache.h"

namespace mb {
class WorkProgress;
}

namespace mb::data {

class RowReader {
 public:
  static constexpr std::int64_t kDefaultPieceBytes = std::int64_t{256} << 20;

  RowReader(hid_t file, hid_t transfer, bool collective,
            std::int64_t pieceBytes = kDefaultPieceBytes);

  // Reads rows allRanks[rank] of dataset `path` into `out` ([rows, ...], allocated). Collective
  // when the reader is: every rank calls it, in the same order, with the same allRanks. With
  // axis = 1 the ranges are columns ([2, E] edge lists) and `out` is [dims[0], columns, ...].
  void read(const std::string& path, const std::vector<ItemRange>& allRanks, int rank,
            at::Tensor& out, int axis = 0);
  // The same, reading from the file only the rows the kept read `key` did not hold (Note [Rows
  // kept between loads]), and keeping these rows for the next. Every rank must pass the same
  // `cache` (null or not) and `key`. Columns (axis = 1) are read whole.
  void read(const std::string& path, const std::vector<ItemRange>& allRanks, int rank,
            at::Tensor& out, int axis, RowCache* cache, const std::string& key);
  // Throws the first recorded failure (call after the last collective read).
  void throwIfFailed() const;
  std::int64_t bytesRead() const { return bytesRead_; }
  std::int64_t bytesKept() const { return bytesKept_; }  // served from a RowCache
  // Told the bytes read so far after each piece (Note [Work progress]); may be null.
  void setProgress(WorkProgress* progress) { progress_ = progress; }

 private:
  void readPiece(hid_t dataset, const std::string& what, std::int64_t begin, std::int64_t end,
                 const at::Tensor& out, std::int64_t offset, int axis);

  hid_t file_;
  hid_t transfer_;
  bool collective_;
  std::int64_t pieceBytes_;
  std::int64_t bytesRead_ = 0;
  std::int64_t bytesKept_ = 0;
  WorkProgress* progress_ = nullptr;
  std::optional<Error> error_;
};

}  // namespace mb::data
