#pragma once
// data.layout = panel: dates x instruments x features, the layout of cross-sectional models
// (a stock universe observed every day).
//
//   /values       [T, N, F]    T dates in time order, N instruments, F features (float)
//   /mask         [T, N]       optional: instrument n is present on date t (bool or integer;
//                              absent: every instrument is present every date)
//   /target       [T, N] or [T, N, K]  what to predict for instrument n at date t
//   /time         [T]          optional: integer dates, non-decreasing
//   /instruments  [N]          optional: names (strings), used in messages
//   /sector       [N]          optional: integer sector ids (< 0: none), for static graph edges
//
// Note [Panel samples]
// A sample is one date t. Its input is, for every instrument, the window of values over dates
// t-W+1..t (W = data.panel.window), gathered on the device from the panel, which a store holds
// once (Note [Window gather] in Store.h): a store of dates [a, b) keeps rows a-H+1..b-1 of
// /values and /mask, where H = max(W, model.graph.lookback when model.graph.k > 0) is the
// history a date needs (the lookback counts also with model.graph.layers = 0, so the same model
// without its graph sees the same dates). Dates before H-1 are not samples (firstUsableSample), and
// the default embargo between splits is H dates, so no date's history reaches into the previous
// split (targets one date ahead included).
//
// When a store is made (prepareStore, on the store's device) the values are normalised per
// date across the instruments present (data.panel.normalize: z-score, or ranks scaled to unit
// variance), and absent entries become 0 (the cross-sectional mean), so a window of an
// instrument that was absent on some of its dates needs no mask; the targets likewise with
// data.panel.normalize_target. Rows of /values may hold NaN where /mask says absent.
//
// A Batch of B dates holds, all with B rows (so streamed chunks merge like any other batch):
//   inputs[0] "values"  [B, N, W, F]  the windows, in the step's input dtype
//   inputs[1] "mask"    [B, N] bool   present on the date
//   inputs[2] "returns" [B, N, L] fp32, when the model builds a correlation graph
//             (model.graph.layers > 0 and k > 0): the normalised model.graph.feature over
//             the last L = model.graph.lookback dates, NaN where absent
//   inputs[3] "sector"  [B, N] int64, with model.graph.sector_edges
//   targets             [B, N] or [B, N, K] fp32 (0 where absent)
#include <string>
#include <vector>

#include "data/Layout.h"

namespace mb::data {

LayoutKind panelLayoutKind();

class PanelLayout final : public Layout {
 public:
  static std::shared_ptr<const Layout> open(hid_t file, const std::string& path,
                                            const Config& config);

  void describe(DataInfo& info) const override;
  std::vector<DatasetMeta> contentDatasets() const override;
  std::string fingerprintDetail() const override;
  std::int64_t firstUsableSample(IndexReader& index) const override;
  NextStart oneWindowEmbargo(IndexReader& index) const override;
  StorePlan planStore(SampleRange samples, DType residentDtype, IndexReader& index) const override;
  void checkValues(const StorePlan& plan, const std::vector<at::Tensor>& tensors) const override;
  std::vector<at::Tensor> prepareStore(const StorePlan& plan,
                                       std::vector<at::Tensor> tensors) const override;
  at::Tensor sampleWeights(const std::vector<at::Tensor>& store) const override;
  at::Tensor targetsPresent(const std::vector<at::Tensor>& store) const override;
  Batch gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
               at::ScalarType inputType) const override;

  // What a store holds after prepareStore, in this order.
  enum Slot : std::size_t { kValues = 0, kMask = 1, kTargets = 2, kSector = 3 };

 private:
  struct Datasets {
    DatasetMeta values, mask, target, instruments, sector;
  };
  struct Settings {
    std::int64_t window = 1;    // W
    std::int64_t lookback = 0;  // L: dates of the graph's returns; 0 = none in the batch
    std::int64_t history = 1;   // H (Note [Panel samples])
    std::int64_t feature = 0;   // column of the returns
    bool sector = false;        // the batch carries sector ids
    PanelNorm normalize = PanelNorm::kZscore;
    PanelNorm normalizeTarget = PanelNorm::kNone;
  };
  PanelLayout(FileSchema schema, Datasets datasets, Settings settings);

  std::int64_t history() const;  // H: rows a date's inputs reach back, itself included
  std::int64_t instruments() const { return datasets_.values.dim(1); }
  // "instrument 3 ('AAPL')" for messages; the name when /instruments has one.
  std::string instrumentName(std::int64_t n) const;
  // Throws DataError for the first non-finite entry of `values` ([rows, N, ...], rows from
  // file row `firstRow`) where `present` ([rows, N]) is set.
  void requireFiniteWherePresent(const ReadSpec& read, const at::Tensor& values,
                                 const at::Tensor& present, std::int64_t firstRow,
                                 const std::string& fix) const;

  Datasets datasets_;
  Settings settings_;
};

// Per-row normalisation across instruments (Note [Panel samples]): `x` [R, N, ...] float,
// `present` [R, N] bool. Returns a new fp32 tensor, 0 where absent.
at::Tensor normalizeAcrossInstruments(const at::Tensor& x, const at::Tensor& present,
                                      PanelNorm mode);

}  // namespace mb::data
