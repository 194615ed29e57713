#pragma once
// Classification metrics of a whole split that are not sums over samples (Model::splitRows /
// splitMetrics): precision, recall and F1 (macro averages), and ROC-AUC. Accuracy is a sum and
// comes from Objective::metricSums.
//
// Definitions (those of scikit-learn's defaults, so numbers compare):
//  - The classes averaged over are those that occur among the labels or the predictions
//    (argmax). precision_c = TP / (TP + FP), recall_c = TP / (TP + FN), F1_c = 2 P R / (P + R),
//    each 0 where its denominator is 0; precision, recall, f1 = their means over those classes.
//  - roc_auc: two classes: the AUC of p(class 1) (the probability of row 1 of the softmax)
//    against label == 1. More classes: the mean over classes of the one-vs-rest AUC of p(c),
//    over the classes with both positive and negative samples. Exact (Mann-Whitney U with tied
//    scores counted half). NaN when no class has both.
#include <cstdint>
#include <map>
#include <string>

#include <ATen/core/Tensor.h>

namespace mb::model {

// [B, 1 + C] fp64: the label, then the C class probabilities (softmax of `logits` [B, C]).
at::Tensor classificationRows(const at::Tensor& logits, const at::Tensor& labels);

// {"precision", "recall", "f1", "roc_auc"} of rows from classificationRows (any number).
std::map<std::string, double> classificationMetrics(const at::Tensor& rows);

}  // namespace mb::model
