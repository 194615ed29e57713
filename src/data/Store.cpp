#include "data/Store.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "data/ValueScan.h"

namespace mb::data {
namespace {

std::vector<std::int64_t> withRows(std::int64_t rows, const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> shape = dims;
  if (shape.empty()) shape.push_back(0);
  shape[0] = rows;
  return shape;
}

// The first non-finite value of row `row`, as text ("nan", "inf", "-inf").
std::string firstNonFinite(const at::Tensor& t, std::int64_t row) {
  at::Tensor values = t[row].reshape({-1}).to(at::kDouble).cpu();
  const double* v = values.data_ptr<double>();
  for (std::int64_t i = 0; i < values.numel(); ++i) {
    if (std::isnan(v[i])) return "nan";
    if (std::isinf(v[i])) return v[i] > 0 ? "inf" : "-inf";
  }
  return "non-finite";
}

std::string dataset(const FileSchema& schema, const ReadSpec& read) {
  return schema.path + ": dataset /" + read.path;
}

void checkFinite(const FileSchema& schema, const ReadSpec& read, const at::Tensor& t) {
  std::int64_t row = firstNonFiniteRow(t);
  if (row < 0) return;
  std::int64_t fileRow = read.rows.begin + row;
  std::string where =
      read.role == Role::kValues
          ? "row " + std::to_string(fileRow) + " of stream " + schema.streams.at(read.stream).name
          : "sample " + std::to_string(fileRow);
  throw DataError(dataset(schema, read) + ": non-finite value (" + firstNonFinite(t, row) +
                      ") at " + where + " (the first in the rows this rank loaded)",
                  "clean or drop that row (e.g. pandas ffill/dropna) before writing the file");
}

void checkLabels(const FileSchema& schema, const ReadSpec& read, const at::Tensor& t) {
  std::int64_t row = firstOutOfRangeRow(t, 0, std::numeric_limits<std::int64_t>::max());
  if (row < 0) return;
  throw DataError(dataset(schema, read) + ": class label " +
                      std::to_string(t[row].item<std::int64_t>()) + " at sample " +
                      std::to_string(read.rows.begin + row) + " is negative",
                  "labels must be 0..classes-1");
}

void checkTokens(const FileSchema& schema, const ReadSpec& read, const at::Tensor& t) {
  std::int64_t vocab = schema.vocabSize;
  std::int64_t row = firstOutOfRangeRow(t, 0, vocab);
  if (row < 0) return;
  throw DataError(dataset(schema, read) + ": token " + std::to_string(t[row].item<std::int64_t>()) +
                      " at position " + std::to_string(read.rows.begin + row) +
                      " is outside [0, vocab_size = " + std::to_string(vocab) + ")",
                  "set the vocab_size attribute to the tokenizer's vocabulary size");
}

}  // namespace

std::int64_t ReadSpec::bytes() const {
  std::int64_t n = 1;
  for (auto d : shape)
    n *= d;
  return n * static_cast<std::int64_t>(c10::elementSize(type));
}

std::int64_t StorePlan::bytes() const {
  std::int64_t total = 0;
  for (const auto& read : reads)
    total += read.bytes();
  return total;
}

StorePlan planStore(const FileSchema& schema, SampleRange samples, DType residentDtype,
                    const EndRow& endRow) {
  StorePlan plan;
  plan.samples = samples;
  std::int64_t n = samples.size();
  at::ScalarType floatType = residentDtype == DType::kBf16 ? at::kBFloat16 : at::kFloat;
  ItemRange sampleRows{samples.begin, samples.end};
  auto addTargets = [&] {
    ReadSpec r{Role::kTargets,
               0,
               schema.targets.path,
               sampleRows,
               withRows(n, schema.targets.info.dims),
               schema.classification ? at::kLong : at::kFloat};
    plan.reads.push_back(r);
  };
  switch (schema.layout) {
    case Layout::kSamples:
      plan.reads.push_back({Role::kFeatures, 0, schema.features.path, sampleRows,
                            withRows(n, schema.features.info.dims), floatType});
      addTargets();
      break;
    case Layout::kSeries:
      for (std::size_t s = 0; s < schema.streams.size(); ++s) {
        // int32 row indices halve the index memory (per sample and stream) when rows allow.
        bool narrow = schema.streams[s].values.info.rows() < (std::int64_t{1} << 31);
        plan.reads.push_back({Role::kEnds,
                              s,
                              schema.streams[s].ends.path,
                              sampleRows,
                              {n},
                              narrow ? at::kInt : at::kLong});
      }
      for (std::size_t s = 0; s < schema.streams.size(); ++s) {
        const auto& stream = schema.streams[s];
        ItemRange rows{0, 0};
        if (n > 0)
          rows = {endRow(s, samples.begin) - stream.window + 1, endRow(s, samples.end - 1) + 1};
        plan.reads.push_back({Role::kValues, s, stream.values.path, rows,
                              withRows(rows.size(), stream.values.info.dims), floatType});
      }
      addTargets();
      break;
    case Layout::kTokens: {
      ItemRange rows{0, 0};
      if (n > 0) rows = {samples.begin * schema.context, samples.end * schema.context + 1};
      bool bytes = schema.tokens.info.typeSize == 1 && !schema.tokens.info.isSigned;
      plan.reads.push_back({Role::kTokens,
                            0,
                            schema.tokens.path,
                            rows,
                            {rows.size()},
                            bytes ? at::kByte : at::kInt});
      break;
    }
  }
  return plan;
}

void checkValues(const FileSchema& schema, const StorePlan& plan,
                 const std::vector<at::Tensor>& tensors) {
  for (std::size_t i = 0; i < plan.reads.size(); ++i) {
    const ReadSpec& read = plan.reads[i];
    const at::Tensor& t = tensors.at(i);
    switch (read.role) {
      case Role::kFeatures:
      case Role::kValues:
        checkFinite(schema, read, t);
        break;
      case Role::kTargets:
        if (schema.classification) {
          checkLabels(schema, read, t);
        } else {
          checkFinite(schema, read, t);
        }
        break;
      case Role::kTokens:
        checkTokens(schema, read, t);
        break;
      case Role::kEnds:
        break;  // checked by checkIndexSlice
    }
  }
}

Store::Store(const FileSchema& schema, const StorePlan& plan, std::vector<at::Tensor> tensors)
    : layout_(schema.layout), samples_(plan.samples), context_(schema.context) {
  if (!tensors.empty()) device_ = tensors.front().device();
  std::vector<at::Tensor> ends(schema.streams.size());
  values_.resize(schema.streams.size());
  for (std::size_t i = 0; i < plan.reads.size(); ++i) {
    const ReadSpec& read = plan.reads[i];
    at::Tensor& t = tensors.at(i);
    bytes_ += t.numel() * static_cast<std::int64_t>(t.element_size());
    switch (read.role) {
      case Role::kFeatures:
      case Role::kTokens:
        features_ = t;
        break;
      case Role::kTargets:
        targets_ = t;
        break;
      case Role::kEnds:
        ends[read.stream] = t;
        break;
      case Role::kValues:
        values_[read.stream] = t;
        break;
    }
  }
  for (std::size_t s = 0; s < schema.streams.size(); ++s) {
    // Rebase the end rows onto the rows this store holds (Note [Window gather]).
    const ReadSpec* valuesRead = nullptr;
    for (const auto& read : plan.reads) {
      if (read.role == Role::kValues && read.stream == s) valuesRead = &read;
    }
    ends_.push_back(ends[s].sub(valuesRead->rows.begin));
    windows_.push_back(schema.streams[s].window);
  }
}

Batch Store::gather(const at::Tensor& local, at::ScalarType inputType) const {
  Batch batch;
  std::int64_t count = local.size(0);
  switch (layout_) {
    case Layout::kSamples:
      batch.inputs.push_back(features_.index_select(0, local).to(inputType));  // [B, T, F] / [B, F]
      batch.targets = targets_.index_select(0, local);
      break;
    case Layout::kSeries:
      for (std::size_t s = 0; s < values_.size(); ++s) {
        std::int64_t window = windows_[s];
        at::Tensor rows = ends_[s].index_select(0, local).sub(window - 1).unsqueeze(1) +
                          at::arange(window, ends_[s].options());  // [B, window]
        batch.inputs.push_back(values_[s]
                                   .index_select(0, rows.reshape({-1}))
                                   .view({count, window, values_[s].size(1)})
                                   .to(inputType));  // [B, window, F_s]
      }
      batch.targets = targets_.index_select(0, local);
      break;
    case Layout::kTokens: {
      at::Tensor rows =
          local.mul(context_).unsqueeze(1) + at::arange(context_ + 1, local.options());
      at::Tensor items =
          features_.index_select(0, rows.reshape({-1})).view({count, context_ + 1}).to(at::kLong);
      batch.inputs.push_back(items.narrow(1, 0, context_).contiguous());  // [B, context]
      batch.targets = items.narrow(1, 1, context_).contiguous();          // [B, context]
      break;
    }
  }
  batch.sampleIndex = local.add(samples_.begin);
  return batch;
}

Batch Store::slice(std::int64_t begin, std::int64_t end, at::ScalarType inputType) const {
  return gather(at::arange(begin, end, at::TensorOptions().dtype(at::kLong).device(device_)),
                inputType);
}

std::int64_t Store::maxLabel() const {
  if (!targets_.defined() || targets_.numel() == 0 || targets_.scalar_type() != at::kLong)
    return -1;
  return targets_.max().item<std::int64_t>();
}

}  // namespace mb::data
