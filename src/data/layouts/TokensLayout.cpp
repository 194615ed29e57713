#include "data/layouts/TokensLayout.h"

#include <optional>

#include <ATen/Functions.h>

#include "common/Error.h"
#include "data/pipeline/ValueScan.h"

namespace mb::data {
namespace {

constexpr const char* kTokensName = "tokens";

std::int64_t readTokenVocab(hid_t file, const std::string& path, const DatasetMeta& tokens) {
  h5::Handle dataset = h5::openDataset(file, tokens.path, ExitCode::kData);
  std::int64_t vocab = 0;
  if (h5::hasAttribute(dataset.get(), "vocab_size")) {
    vocab = h5::readIntAttribute(dataset.get(), "vocab_size", ExitCode::kData);
  } else if (h5::hasAttribute(file, "vocab_size")) {
    vocab = h5::readIntAttribute(file, "vocab_size", ExitCode::kData);
  } else {
    throw DataError(schema::where(path, tokens.path) + ": attribute vocab_size is missing",
                    "set it with h5py: f['tokens'].attrs['vocab_size'] = 256");
  }
  if (vocab < 1 || vocab > (std::int64_t{1} << 31))
    throw DataError(schema::where(path, tokens.path) + ": vocab_size = " + std::to_string(vocab) +
                    " must be in [1, 2^31]");
  return vocab;
}

std::optional<std::string> inspectTokens(hid_t file, const std::vector<ListedDataset>& datasets) {
  for (const auto& d : datasets) {
    if (d.path != "tokens") continue;
    std::string text =
        "layout: tokens, " + std::to_string(d.info.rows()) + " tokens (" + d.info.typeName() + ")";
    h5::Handle dataset = h5::openDataset(file, "tokens", ExitCode::kData);
    if (h5::hasAttribute(dataset.get(), "vocab_size"))
      text += ", vocab_size " +
              std::to_string(h5::readIntAttribute(dataset.get(), "vocab_size", ExitCode::kData));
    text += "\nsamples: (tokens - 1) / context, e.g. " + std::to_string((d.info.rows() - 1) / 128) +
            " at context 128";
    return text;
  }
  return std::nullopt;
}

}  // namespace

LayoutKind tokensLayoutKind() {
  LayoutKind kind;
  kind.name = kTokensName;
  kind.hasTime = false;  // tokens carry no per-sample time
  kind.summary = "a token stream: /tokens [T] (attribute vocab_size), context + 1 tokens a sample";
  kind.marker = "/tokens";
  kind.open = TokensLayout::open;
  kind.inspect = inspectTokens;
  return kind;
}

TokensLayout::TokensLayout(FileSchema schema, DatasetMeta tokens, std::int64_t context,
                           std::int64_t vocabSize)
    : Layout(std::move(schema)),
      tokens_(std::move(tokens)),
      context_(context),
      vocabSize_(vocabSize) {}

std::shared_ptr<const Layout> TokensLayout::open(hid_t file, const std::string& path,
                                                 const Config& config) {
  FileSchema s;
  s.path = path;
  s.layout = kTokensName;
  DatasetMeta tokens = schema::require(file, path, config.data.names.tokens, "tokens");
  schema::requireRank(path, tokens, 1, 1, "[T]");
  schema::requireInteger(path, tokens, "token ids: uint8, uint16, or int32");
  std::int64_t vocab = readTokenVocab(file, path, tokens);
  std::int64_t context = config.data.context;
  std::int64_t length = tokens.info.rows();
  if (length < context + 1)
    throw DataError(
        schema::where(path, tokens.path) + ": " + std::to_string(length) +
            " tokens, but one sample needs data.context + 1 = " + std::to_string(context + 1),
        "use a smaller data.context or more text");
  s.numSamples = (length - 1) / context;
  return std::shared_ptr<const Layout>(
      new TokensLayout(std::move(s), std::move(tokens), context, vocab));
}

void TokensLayout::describe(DataInfo& info) const {
  info.inputs = {{"tokens", context_, 0}};
  info.targetShape = {context_};
  info.integerTargets = true;
  info.vocabSize = vocabSize_;
  info.countsTokens = true;
}

std::string TokensLayout::fingerprintDetail() const {
  return "|vocab=" + std::to_string(vocabSize_);
}

// Consecutive items share one token.
NextStart TokensLayout::oneWindowEmbargo(IndexReader& /*index*/) const {
  return fixedGap(1);
}

StorePlan TokensLayout::planStore(SampleRange samples, DType /*residentDtype*/,
                                  IndexReader& /*index*/) const {
  StorePlan plan;
  plan.samples = samples;
  ReadSpec tokens;
  tokens.path = tokens_.path;
  if (samples.size() > 0) tokens.rows = {samples.begin * context_, samples.end * context_ + 1};
  tokens.shape = {tokens.rows.size()};
  bool bytes = tokens_.info.typeSize == 1 && !tokens_.info.isSigned;
  tokens.type = bytes ? at::kByte : at::kInt;
  plan.reads = {tokens};
  return plan;
}

void TokensLayout::checkInput(const ReadSpec& read, const at::Tensor& values) const {
  std::int64_t row = firstOutOfRangeRow(values, 0, vocabSize_);
  if (row < 0) return;
  throw DataError(describeDataset(schema_, tokens_) + ": token " +
                      std::to_string(values[row].item<std::int64_t>()) + " at position " +
                      std::to_string(read.rows.begin + row) +
                      " is outside [0, vocab_size = " + std::to_string(vocabSize_) + ")",
                  "set the vocab_size attribute to the tokenizer's vocabulary size");
}

Batch TokensLayout::gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
                           at::ScalarType /*inputType*/) const {
  const std::int64_t count = local.size(0);
  at::Tensor rows = local.mul(context_).unsqueeze(1) + at::arange(context_ + 1, local.options());
  at::Tensor items =
      store[0].index_select(0, rows.reshape({-1})).view({count, context_ + 1}).to(at::kLong);
  Batch batch;
  batch.inputs.push_back(items.narrow(1, 0, context_).contiguous());  // [B, context]
  batch.targets = items.narrow(1, 1, context_).contiguous();          // [B, context]
  return batch;
}

}  // namespace mb::data
