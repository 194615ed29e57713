#include "model/parts/PanelGraph.h"

#include <algorithm>
#include <limits>

#include <ATen/Functions.h>
#include <ATen/core/grad_mode.h>

#include "common/Error.h"

namespace mb::model {
namespace {

// Temporaries of one build chunk: about nine [D, N, N] float64 tensors.
constexpr std::int64_t kBuildBytes = std::int64_t{256} << 20;
// A series whose variance is below this share of its sum of squares is treated as constant.
constexpr double kRelativeVariance = 1e-10;

// [D, N, N] correlations of the chunk's returns, -inf where no edge may be drawn.
at::Tensor correlations(const at::Tensor& returns, const at::Tensor& present,
                        std::int64_t minPeriods) {
  at::Tensor r = returns.to(at::kDouble);  // [D, N, L]
  at::Tensor seen = at::isfinite(r);       // [D, N, L]
  at::Tensor m = seen.to(at::kDouble);
  at::Tensor x = at::where(seen, r, at::zeros({}, r.options()));
  at::Tensor mt = m.transpose(1, 2);               // [D, L, N]
  at::Tensor shared = at::bmm(m, mt);              // n_ij
  at::Tensor sx = at::bmm(x, mt);                  // sum over shared dates of x_i
  at::Tensor sxx = at::bmm(x * x, mt);             // ... of x_i^2
  at::Tensor sxy = at::bmm(x, x.transpose(1, 2));  // ... of x_i x_j
  at::Tensor sy = sx.transpose(1, 2), syy = sxx.transpose(1, 2);
  at::Tensor n = shared.clamp_min(1);
  at::Tensor cov = sxy - sx * sy / n;
  at::Tensor varI = sxx - sx * sx / n, varJ = syy - sy * sy / n;
  const std::int64_t nodes = r.size(1);
  at::Tensor both = present.unsqueeze(2).logical_and(present.unsqueeze(1));  // [D, N, N]
  at::Tensor valid = both.logical_and(shared >= static_cast<double>(minPeriods))
                         .logical_and(varI > kRelativeVariance * sxx)
                         .logical_and(varJ > kRelativeVariance * syy)
                         .logical_and(at::eye(nodes, both.options()).logical_not());
  at::Tensor corr = cov / (varI * varJ).clamp_min(std::numeric_limits<double>::min()).sqrt();
  return at::where(valid, corr,
                   at::full({}, -std::numeric_limits<double>::infinity(), corr.options()));
}

// [D, N, N] bool: adjacency[d, i, j] = edge j -> i (Note [Panel graph]).
at::Tensor adjacency(const at::Tensor& returns, const at::Tensor& present, const at::Tensor& sector,
                     const GraphConfig& config) {
  const std::int64_t dates = present.size(0), nodes = present.size(1);
  at::Tensor adjacent = at::zeros({dates, nodes, nodes}, present.options().dtype(at::kBool));
  const std::int64_t k = std::min(config.k, nodes - 1);
  if (k > 0) {
    at::Tensor corr = correlations(returns, present, config.minPeriods);
    auto [best, neighbours] = at::topk(corr, k, /*dim=*/2);  // [D, N, k]
    adjacent.scatter_(2, neighbours, at::isfinite(best));
  }
  at::Tensor self = at::eye(nodes, adjacent.options())
                        .unsqueeze(0)
                        .logical_and(present.unsqueeze(2));  // present nodes attend to themselves
  adjacent.logical_or_(self);
  if (sector.defined()) {
    at::Tensor s = sector.to(at::kLong);
    at::Tensor same = s.unsqueeze(2).eq(s.unsqueeze(1)).logical_and(s.unsqueeze(2).ge(0));
    adjacent.logical_or_(same.logical_and(present.unsqueeze(2)).logical_and(present.unsqueeze(1)));
  }
  return adjacent;
}

// Moves a small host tensor to `device` without waiting for the device's queue.
at::Tensor toDeviceAsync(const at::Tensor& host, c10::Device device) {
  if (device.is_cpu()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace

std::vector<at::Tensor> buildPanelGraphs(const at::Tensor& returns, const at::Tensor& present,
                                         const at::Tensor& sector, const GraphConfig& config) {
  at::NoGradGuard noGrad;
  const std::int64_t dates = present.size(0), nodes = present.size(1);
  const std::int64_t chunk =
      std::max<std::int64_t>(1, kBuildBytes / std::max<std::int64_t>(1, nodes * nodes * 8 * 9));
  std::vector<at::Tensor> graphs;
  for (std::int64_t begin = 0; begin < dates; begin += chunk) {
    const std::int64_t count = std::min(chunk, dates - begin);
    at::Tensor part = present.narrow(0, begin, count).to(at::kBool);
    at::Tensor adjacent =
        adjacency(returns.defined() ? returns.narrow(0, begin, count) : returns, part,
                  sector.defined() ? sector.narrow(0, begin, count) : sector, config);
    // Row-major nonzero: sorted by (date, destination, source).
    at::Tensor found = adjacent.nonzero();  // [E, 3]
    at::Tensor counts = adjacent.sum({1, 2}).to(at::kCPU);
    std::int64_t offset = 0;
    for (std::int64_t d = 0; d < count; ++d) {
      const std::int64_t edges = counts[d].item<std::int64_t>();
      at::Tensor rows = found.narrow(0, offset, edges);
      graphs.push_back(at::stack({rows.select(1, 2), rows.select(1, 1)}));  // [2, E]: src, dst
      offset += edges;
    }
  }
  return graphs;
}

PanelGraphCache::PanelGraphCache(const GraphConfig& config)
    : config_(config), budgetBytes_(static_cast<std::int64_t>(config.cacheMb * (1 << 20))) {}

void PanelGraphCache::startEpoch() {
  stats_.builtThisEpoch = 0;
  if (config_.rebuild != GraphRebuild::kPerEpoch) return;
  graphs_.clear();
  stats_.cached = 0;
  stats_.bytes = 0;
}

at::Tensor PanelGraphCache::batchEdges(const data::Batch& batch, const at::Tensor& returns,
                                       const at::Tensor& present, const at::Tensor& sector) {
  at::NoGradGuard noGrad;
  const std::int64_t dates = present.size(0), nodes = present.size(1);
  std::vector<std::int64_t> keys = batch.hostSampleIndex;
  if (static_cast<std::int64_t>(keys.size()) != dates) {  // a batch made by hand: ask the device
    at::Tensor index = batch.sampleIndex.to(at::kCPU, at::kLong).contiguous();
    keys.assign(index.data_ptr<std::int64_t>(), index.data_ptr<std::int64_t>() + index.numel());
  }
  if (static_cast<std::int64_t>(keys.size()) != dates)
    throw RuntimeError("gat: the batch has " + std::to_string(dates) + " dates but " +
                       std::to_string(keys.size()) + " sample indices");

  // Build the dates the cache does not hold, together.
  std::vector<at::Tensor> edges(dates);
  std::vector<std::int64_t> missing;
  for (std::int64_t b = 0; b < dates; ++b) {
    auto it = graphs_.find(keys[b]);
    if (it != graphs_.end()) {
      edges[b] = it->second;
      ++stats_.hits;
    } else {
      missing.push_back(b);
    }
  }
  if (!missing.empty()) {
    if (!returns.defined() && config_.k > 0)
      throw RuntimeError("gat: the batch carries no returns to build its graph from",
                         "the panel layout adds them when model.graph.layers > 0 and k > 0");
    at::Tensor rows = toDeviceAsync(at::tensor(missing, at::kLong), present.device());
    std::vector<at::Tensor> built = buildPanelGraphs(
        returns.defined() ? returns.index_select(0, rows) : returns, present.index_select(0, rows),
        sector.defined() ? sector.index_select(0, rows) : sector, config_);
    for (std::size_t i = 0; i < missing.size(); ++i) {
      at::Tensor compact = built[i].to(at::kInt);  // node ids < N fit int32: half the memory
      const std::int64_t bytes = compact.numel() * 4;
      ++stats_.built;
      ++stats_.builtThisEpoch;
      if (stats_.bytes + bytes <= budgetBytes_ && !graphs_.count(keys[missing[i]])) {
        graphs_.emplace(keys[missing[i]], compact);
        stats_.bytes += bytes;
        stats_.cached = static_cast<std::int64_t>(graphs_.size());
      } else {
        ++stats_.uncachedBuilds;
      }
      edges[missing[i]] = compact;
    }
  }

  if (dates == 0) return at::empty({2, 0}, present.options().dtype(at::kLong));
  // One disconnected graph: date b's nodes are b*N .. b*N + N - 1.
  std::vector<std::int64_t> counts(dates);
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < dates; ++b) {
    counts[b] = edges[b].size(1);
    total += counts[b];
  }
  at::Tensor all = at::cat(edges, 1).to(at::kLong);  // [2, E]
  auto options = all.options();
  at::Tensor bases = at::arange(dates, options).mul_(nodes);
  at::Tensor repeats = toDeviceAsync(at::tensor(counts, at::kLong), all.device());
  at::Tensor shift = at::repeat_interleave(bases, repeats, 0, total);  // [E]
  return all + shift.unsqueeze(0);
}

}  // namespace mb::model
