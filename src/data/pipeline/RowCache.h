#pragma once
// Note [Rows kept between loads]
// A walk-forward loads its file once per fold, and consecutive folds want nearly the same rows:
// each rank's share of an expanding train split moves by the new period's samples over the
// ranks. While a RowCache::Scope for the file lives (the walk holds one), RowReader keeps, per
// dataset and rank count, the rows this rank read last and every rank's range of them, and the
// next load of that dataset reads from the file only the rows this rank did not hold: at most a
// range before and one after what it holds. Every rank knows every rank's old and new ranges
// (they come from the same plans), so all compute the same reads, and the collective reads
// (Note [Collective reads]) stay matched.
// - A rank holds one range per dataset: the latest load's. Memory is flat across folds: the
//   rows kept are those the fold's resident data holds (shared with it on the host; a host copy
//   of device-resident rows).
// - Mapped rows (Note [Zero-copy host residency]) and streamed chunks do not go through
//   RowReader: the page cache keeps the former.
// - The rows are the file's as the first load read them: a walk checks the file's identity
//   before its first fold and reads it for the folds after.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "data/pipeline/GlobalOrder.h"

namespace mb::data {

class RowCache {
 public:
  struct Held {
    std::vector<ItemRange> ranges;  // every rank's rows, as the last load read them
    at::Tensor rows;                // this rank's, on the host, in the load's dtype
  };

  // Keeps rows of `path` (as data.path names it) while it lives; one scope at a time.
  class Scope {
   public:
    explicit Scope(const std::string& path);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };

  // The cache of `path` while a Scope holds it; null otherwise.
  static RowCache* of(const std::string& path);

  // What the last load of dataset `key` held; null when none.
  const Held* find(const std::string& key) const;
  void keep(const std::string& key, Held held);
  std::int64_t bytesHeld() const;

 private:
  std::vector<std::pair<std::string, Held>> entries_;
};

// The rows of `need` that `have` lacks: the range before it and the range after it (either may
// be empty). Disjoint ranges: all of `need` before.
std::pair<ItemRange, ItemRange> rowsLacking(const ItemRange& need, const ItemRange& have);

}  // namespace mb::data
