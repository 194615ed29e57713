#pragma once
// The splits a load would plan, without the load: from the file's metadata, its timestamps and
// its index arrays (series window ends), nothing else read. `megabatch walk` plans every fold's
// splits with it before any fold trains, so that a cut that leaves a fold without train or val
// samples stops the walk at once, naming the fold (Note [Walk-forward] in src/walk/WalkPlan.h).
// The splits are those ShardedData::load plans for the same config (Note [Splits by time]).
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/Hdf5.h"
#include "config/Config.h"
#include "data/DataInfo.h"
#include "data/Schema.h"
#include "data/pipeline/Splits.h"
#include "data/pipeline/TimeSplits.h"

namespace mb::data {

class Layout;

class SplitPreview {
 public:
  // Opens and checks config.data.path as the loader does (DataError, exit 3, for a bad file;
  // ConfigError for a file without timestamps).
  explicit SplitPreview(const Config& config);
  ~SplitPreview();
  SplitPreview(const SplitPreview&) = delete;
  SplitPreview& operator=(const SplitPreview&) = delete;

  // The samples whose windows are complete: [first usable, N).
  SampleRange usable() const { return usable_; }
  // train, val and test as the loader would plan them with `split` (DataError as it would).
  std::array<SampleRange, 3> plan(const SplitConfig& split);
  SampleTimes& times() { return *times_; }
  TimeUnit unit() const { return unit_; }

 private:
  h5::Handle file_;
  std::shared_ptr<const Layout> layout_;
  std::unique_ptr<IndexReader> index_;
  std::optional<SampleTimes> times_;
  SampleRange usable_;
  NextStart embargo_;
  std::int64_t horizon_ = 0;
  TimeUnit unit_ = TimeUnit::kSeconds;
};

}  // namespace mb::data
