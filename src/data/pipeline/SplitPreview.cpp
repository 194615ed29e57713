#include "data/pipeline/SplitPreview.h"

#include <mutex>

#include "common/Error.h"
#include "common/Hdf5External.h"
#include "data/Layout.h"
#include "data/LayoutRegistry.h"

namespace mb::data {

SplitPreview::SplitPreview(const Config& config)
    : horizon_(config.data.horizon), unit_(config.data.timeUnit) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  h5::silenceLibraryErrors();
  h5::setAllowExternal(config.data.allowExternal);
  file_ = h5::openFile(config.data.path, false, ExitCode::kData);
  layout_ = openLayout(file_.get(), config.data.path, config);
  const FileSchema& schema = layout_->schema();
  if (!schema.timestamps.present())
    throw DataError(
        config.data.path + " has no timestamps (dataset /" +
            (schema.layout == "panel" ? config.data.names.time : config.data.names.timestamps) +
            "), so it cannot be cut into periods",
        "add each sample's time to the file (docs/data-format.md)");
  index_ = std::make_unique<IndexReader>(file_.get(), schema.path);
  usable_ = {layout_->firstUsableSample(*index_), schema.numSamples};
  // As ShardedData's plan: the layout's one-window embargo, past the horizon when it is known.
  const SplitConfig& split = config.data.split;
  embargo_ = split.embargo >= 0 ? fixedGap(split.embargo) : layout_->oneWindowEmbargo(*index_);
  if (split.embargo < 0 && horizon_ > 0) embargo_ = pastTheHorizon(horizon_, std::move(embargo_));
  times_.emplace(*index_, schema.timestamps, unit_, schema.path);
}

SplitPreview::~SplitPreview() {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  times_.reset();
  index_.reset();
  layout_.reset();
  file_.reset();
}

std::array<SampleRange, 3> SplitPreview::plan(const SplitConfig& split) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  return planTimeSplits(usable_, split, *times_, embargo_, horizon_);
}

}  // namespace mb::data
