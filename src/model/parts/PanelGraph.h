#pragma once
// The graph between the instruments of a date that kind: gat attends over, built on the device
// and cached per date.
//
// Note [Panel graph]
// For date t, instrument i receives edges from (attends to):
//   - itself (a self-loop), when present;
//   - its k nearest neighbours by return correlation: the instruments j != i present on t
//     whose correlation with i is largest. The correlation is Pearson's over the dates of the
//     lookback that both were present on ("pairwise complete"), of the panel's normalised
//     return feature (the batch's "returns" input, NaN where absent); a pair sharing fewer
//     than model.graph.min_periods dates, or with a constant series, has none. With fewer
//     candidates than k, i gets those there are;
//   - with model.graph.sector_edges, every other present instrument of its sector (/sector,
//     ids < 0 belong to none).
// Absent instruments have no edges at all. An edge is listed once even when it has several
// reasons. The edges of a date are [2, E] (row 0 the source j, row 1 the destination i),
// sorted by (destination, source).
//
// Building uses only batched matrix products and topk over the dates being built, in float64
// (two correlations a rounding error apart would otherwise swap neighbours between machines):
// with m the [D, N, L] presence and x the returns with 0 where absent,
//   n = m m^T, sx = x m^T, sxx = x^2 m^T, sxy = x x^T     (all [D, N, N], D dates at once)
//   cov = sxy - sx sx^T / n,  var_i = sxx - sx^2 / n,  var_j = its transpose,
//   corr = cov / sqrt(var_i var_j),
// then topk over the candidates of each row. Dates are built in chunks that keep these
// [D, N, N] temporaries near 256 MiB.
//
// Note [Panel graph cache]
// A date's graph depends only on the data, so it is built once and kept on the device
// (model.graph.rebuild: once), up to model.graph.cache_mb; dates beyond the budget are built
// whenever they are used. With rebuild: per_epoch the cache is emptied at every train epoch
// start. A batch of B dates is one disconnected graph over B x N nodes (date b's instrument i
// is node b*N + i): the cached edges of each date shifted by b*N and concatenated. Keys are
// the dates' sample indices, which the host knows without reading the device
// (Batch::hostSampleIndex), so a step with every date cached does no graph work and no
// device-to-host transfer.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "config/Config.h"
#include "data/Batch.h"

namespace mb::model {

// The graphs of D dates (Note [Panel graph]): `returns` [D, N, L] float (NaN where absent),
// `present` [D, N] bool, `sector` [D, N] integer or undefined. One [2, E_d] int64 tensor per
// date, on the inputs' device.
std::vector<at::Tensor> buildPanelGraphs(const at::Tensor& returns, const at::Tensor& present,
                                         const at::Tensor& sector, const GraphConfig& config);

class PanelGraphCache {
 public:
  struct Stats {
    std::int64_t built = 0;           // graphs built since the run started
    std::int64_t builtThisEpoch = 0;  // since the last startEpoch()
    std::int64_t cached = 0;          // dates held now
    std::int64_t bytes = 0;           // device bytes they take
    std::int64_t hits = 0;            // lookups answered by the cache
    std::int64_t uncachedBuilds = 0;  // builds of dates the budget had no room for
  };

  explicit PanelGraphCache(const GraphConfig& config);

  // The block-diagonal graph of a batch: [2, E] int64 over node ids b*N + i.
  // `returns` [B, N, L], `present` [B, N] bool, `sector` [B, N] or undefined.
  at::Tensor batchEdges(const data::Batch& batch, const at::Tensor& returns,
                        const at::Tensor& present, const at::Tensor& sector);
  // A train epoch starts: rebuild per_epoch forgets every graph.
  void startEpoch();
  // Every graph and count dropped, as at the start of the run.
  void forget() {
    graphs_.clear();
    stats_ = Stats{};
  }
  const Stats& stats() const { return stats_; }

 private:
  GraphConfig config_;
  std::int64_t budgetBytes_;
  std::unordered_map<std::int64_t, at::Tensor> graphs_;  // date -> [2, E] int32 edges
  Stats stats_;
};

}  // namespace mb::model
