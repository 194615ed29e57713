#pragma once
// data.layout = tokens: `/tokens` [T] uint8, uint16 or int32 with attribute vocab_size (on the
// dataset or the file). Sample i is tokens [i*context, (i+1)*context] (context + 1 tokens): the
// inputs are the first context, the targets the last context (next-token prediction).
#include "data/Layout.h"

namespace mb::data {

LayoutKind tokensLayoutKind();

class TokensLayout final : public Layout {
 public:
  static std::shared_ptr<const Layout> open(hid_t file, const std::string& path,
                                            const Config& config);

  void describe(DataInfo& info) const override;
  std::vector<DatasetMeta> contentDatasets() const override { return {tokens_}; }
  std::string fingerprintDetail() const override;
  NextStart oneWindowEmbargo(IndexReader& index) const override;
  StorePlan planStore(SampleRange samples, DType residentDtype, IndexReader& index) const override;
  Batch gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
               at::ScalarType inputType) const override;

 protected:
  void checkInput(const ReadSpec& read, const at::Tensor& values) const override;

 private:
  TokensLayout(FileSchema schema, DatasetMeta tokens, std::int64_t context, std::int64_t vocabSize);

  DatasetMeta tokens_;  // [T] integer
  std::int64_t context_ = 0;
  std::int64_t vocabSize_ = 0;
};

}  // namespace mb::data
