#include "model/parts/ClassMetrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>

namespace mb::model {
namespace {

// AUC of `scores` for `positive` (Mann-Whitney U: average ranks, ties counted half); NaN when
// either group is empty.
double rocAuc(const std::vector<double>& scores, const std::vector<bool>& positive) {
  const std::size_t n = scores.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  double positiveRanks = 0;
  double positives = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]])
      ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // mean of ranks i+1 .. j
    for (std::size_t k = i; k < j; ++k) {
      if (positive[order[k]]) {
        positiveRanks += rank;
        positives += 1;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  return (positiveRanks - positives * (positives + 1) / 2) / (positives * negatives);
}

}  // namespace

at::Tensor classificationRows(const at::Tensor& logits, const at::Tensor& labels) {
  at::NoGradGuard noGrad;
  at::Tensor probabilities = at::softmax(logits.detach().to(at::kDouble), 1);  // [B, C]
  return at::cat({labels.to(at::kDouble).reshape({-1, 1}), probabilities}, 1);
}

std::map<std::string, double> classificationMetrics(const at::Tensor& rows) {
  at::Tensor table = rows.to(at::kCPU, at::kDouble).contiguous();
  const std::int64_t n = table.size(0);
  const std::int64_t classes = table.size(1) - 1;
  auto cell = table.accessor<double, 2>();
  std::vector<std::int64_t> truth(n), predicted(n);
  for (std::int64_t i = 0; i < n; ++i) {
    truth[i] = std::llround(cell[i][0]);
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < classes; ++c) {
      if (cell[i][c + 1] > cell[i][best + 1]) best = c;
    }
    predicted[i] = best;
  }
  double precision = 0, recall = 0, f1 = 0;
  std::int64_t averaged = 0;
  for (std::int64_t c = 0; c < classes; ++c) {
    std::int64_t tp = 0, fp = 0, fn = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      tp += truth[i] == c && predicted[i] == c;
      fp += truth[i] != c && predicted[i] == c;
      fn += truth[i] == c && predicted[i] != c;
    }
    if (tp + fp + fn == 0) continue;  // neither a label nor a prediction
    const double p = tp + fp > 0 ? static_cast<double>(tp) / static_cast<double>(tp + fp) : 0.0;
    const double r = tp + fn > 0 ? static_cast<double>(tp) / static_cast<double>(tp + fn) : 0.0;
    precision += p;
    recall += r;
    f1 += p + r > 0 ? 2 * p * r / (p + r) : 0.0;
    ++averaged;
  }
  const double count = static_cast<double>(std::max<std::int64_t>(averaged, 1));
  std::map<std::string, double> metrics{
      {"precision", precision / count}, {"recall", recall / count}, {"f1", f1 / count}};

  double aucSum = 0;
  std::int64_t aucClasses = 0;
  std::vector<double> scores(n);
  std::vector<bool> positive(n);
  for (std::int64_t c = classes == 2 ? 1 : 0; c < classes; ++c) {
    for (std::int64_t i = 0; i < n; ++i) {
      scores[i] = cell[i][c + 1];
      positive[i] = truth[i] == c;
    }
    const double auc = rocAuc(scores, positive);
    if (std::isnan(auc)) continue;
    aucSum += auc;
    ++aucClasses;
  }
  metrics["roc_auc"] = aucClasses > 0 ? aucSum / static_cast<double>(aucClasses)
                                      : std::numeric_limits<double>::quiet_NaN();
  return metrics;
}

}  // namespace mb::model
