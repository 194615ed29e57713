#pragma once
// data.layout = samples: one row per sample, `/features` [N, T, F] (a window per sample) or
// [N, F], `/targets` [N] or [N, K], optional `/timestamps` [N].
#include "data/Layout.h"

namespace mb::data {

LayoutKind samplesLayoutKind();

class SamplesLayout final : public Layout {
 public:
  static std::shared_ptr<const Layout> open(hid_t file, const std::string& path,
                                            const Config& config);

  void describe(DataInfo& info) const override;
  std::vector<DatasetMeta> contentDatasets() const override { return {features_}; }
  NextStart oneWindowEmbargo(IndexReader& index) const override;
  StorePlan planStore(SampleRange samples, DType residentDtype, IndexReader& index) const override;
  Batch gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
               at::ScalarType inputType) const override;

 private:
  SamplesLayout(FileSchema schema, DatasetMeta features);
  bool windowed() const { return features_.info.dims.size() == 3; }

  DatasetMeta features_;  // [N, T, F] or [N, F]
};

}  // namespace mb::data
