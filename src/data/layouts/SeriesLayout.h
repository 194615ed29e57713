#pragma once
// data.layout = series: one group per input stream (e.g. one per timeframe: m1, m5, h1),
// `/series/<name>/values` [T_s, F_s]; `/samples/end/<name>` [N] integer, the row of the last
// row of sample i's window in stream s; `/targets` [N] or [N, K]; optional `/timestamps` [N].
// The window length of each stream comes from data.streams; windows are gathered on the
// device from the resident rows (Note [Window gather] in Store.h).
#include "data/Layout.h"

namespace mb::data {

LayoutKind seriesLayoutKind();

class SeriesLayout final : public Layout {
 public:
  struct Stream {
    std::string name;         // "m5"
    std::int64_t window = 0;  // rows per sample window (from the config)
    DatasetMeta values;       // [T_s, F_s]
    DatasetMeta ends;         // [N] integer: row of the last window row of each sample
  };

  static std::shared_ptr<const Layout> open(hid_t file, const std::string& path,
                                            const Config& config);

  void checkIndexSlice(hid_t file, std::int64_t begin, std::int64_t end) const override;
  void describe(DataInfo& info) const override;
  std::vector<DatasetMeta> contentDatasets() const override;
  std::int64_t firstUsableSample(IndexReader& index) const override;
  NextStart oneWindowEmbargo(IndexReader& index) const override;
  StorePlan planStore(SampleRange samples, DType residentDtype, IndexReader& index) const override;
  std::vector<at::Tensor> prepareStore(const StorePlan& plan,
                                       std::vector<at::Tensor> tensors) const override;
  Batch gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
               at::ScalarType inputType) const override;

 protected:
  void checkInput(const ReadSpec& read, const at::Tensor& values) const override;

 private:
  SeriesLayout(FileSchema schema, std::vector<Stream> streams);
  // The first row of sample i's window in stream s (end - window + 1).
  std::int64_t windowStart(IndexReader& index, std::size_t s, std::int64_t sample) const;
  // The first sample >= cut whose windows share no row with sample `previous`'s windows in
  // any stream; numSamples if none.
  std::int64_t firstDisjoint(IndexReader& index, std::int64_t previous, std::int64_t cut) const;

  std::vector<Stream> streams_;
};

}  // namespace mb::data
