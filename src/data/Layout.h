#pragma once
// Note [Adding a layout]
// A data layout (`data.layout`) is everything that differs between kinds of data files: which
// datasets a file needs, what a sample is, how a store of samples is read and gathered into a
// Batch. Everything else (splits, the canonical global order, shards, collective reads, the
// memory budget, streaming, value scans) is shared and knows no layout by name.
//
// A layout is one file pair in src/data/layouts/ (a large one may keep its stores in a second
// .cpp: PanelStore.cpp, GraphsStore.cpp) and one line in src/data/LayoutRegistry.cpp:
//
//  1. A LayoutKind (LayoutRegistry.h): its name, a one-line summary for --help-config and
//     messages, open(), its config rules (checkConfig, seen by config as LayoutRules: Note
//     [Kinds handed down]), and inspect() for `megabatch inspect`.
//  2. A class derived from Layout, made by open() from an open file. open() is pass 1 of
//     Note [Schema validation]: it checks the structure (the helpers of namespace schema in
//     Schema.h name the file, dataset and fix in their DataErrors) and records the datasets
//     it found. It fills FileSchema: numSamples, and targets/timestamps where it has them.
//  3. The Layout methods below, each answering one question the shared code asks:
//       checkIndexSlice   pass 2: this rank's slice of per-sample index arrays
//       describe          what the model sees: DataInfo inputs, target shape, classes/vocab
//       contentDatasets   the datasets whose shapes and sampled rows identify the content
//       firstUsableSample the first sample whose inputs exist (series: a complete window)
//       oneWindowEmbargo  the default embargo: no sample may share input rows across splits
//       planStore         the reads that make a store of samples [begin, end), in a fixed order
//       checkInput        pass 3: the values of one input read (targets are checked by the base)
//       prepareStore      turns what was read into the store's tensors (e.g. rebases row ids)
//       gather            positions of a store -> Batch, on the store's device, by index
//                         arithmetic (never a materialised copy per sample)
//       sampleCosts       (optional) the work of each train sample, to balance ranks by it
//                         (graphs: nodes per graph; Note [Weighted shards] in GlobalOrder.h)
//  4. Tests: the schema errors (tests/data/test_data_errors.py), a file h5py writes
//     (tests/data/test_data_files.py), and the gather against a reference.
//  5. docs/data-format.md: the layout's datasets and an h5py example.
//
// A layout's methods are const and the object is shared (the resident stores and the stream
// loader hold it), so they may be called from the stream loader's thread.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "config/Config.h"
#include "data/Batch.h"
#include "data/DataInfo.h"
#include "data/LayoutRegistry.h"
#include "data/Schema.h"
#include "data/pipeline/Splits.h"
#include "data/pipeline/StorePlan.h"

namespace mb::data {

class Layout {
 public:
  virtual ~Layout() = default;
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;

  const FileSchema& schema() const { return schema_; }
  const std::string& path() const { return schema_.path; }

  // Pass 2 of Note [Schema validation] for samples [begin, end) of the per-sample index
  // arrays. The base checks that timestamps never decrease.
  virtual void checkIndexSlice(hid_t file, std::int64_t begin, std::int64_t end) const;

  // Fills what the model's shape depends on: info.inputs, targetShape, integerTargets,
  // vocabSize, countsTokens. The base fills the targets from schema().targets.
  virtual void describe(DataInfo& info) const;

  // The datasets that identify the content (shapes, dtypes and a few hashed rows go into the
  // fingerprint), in a fixed order, and text the fingerprint adds after them.
  virtual std::vector<DatasetMeta> contentDatasets() const = 0;
  virtual std::string fingerprintDetail() const { return {}; }

  // The first sample whose inputs exist in the file (0 unless a window reaches back past the
  // first row). Throws DataError when no sample is usable.
  virtual std::int64_t firstUsableSample(IndexReader& index) const;
  // The embargo of data.split.embargo = -1 (Note [Splits and embargo]). The result may keep
  // a reference to `index`.
  virtual NextStart oneWindowEmbargo(IndexReader& index) const = 0;
  // The reads of a store holding samples `samples` (possibly empty), in a fixed order.
  virtual StorePlan planStore(SampleRange samples, DType residentDtype,
                              IndexReader& index) const = 0;

  // Pass 3: the values a rank loaded for `plan` (`tensors` follow plan.reads). Throws
  // DataError naming the dataset and the first bad sample or row in the file's numbering.
  // The default checks each kInput read (checkInput) and the targets; a layout whose reads
  // depend on each other (panel: values are checked where its mask says present) overrides it.
  virtual void checkValues(const StorePlan& plan, const std::vector<at::Tensor>& tensors) const;

  // The store's tensors from those read for `plan` (same order; a layout may append more).
  // The kTargets slot must end up holding exactly the targets of plan.samples, in order.
  // Default: as read.
  virtual std::vector<at::Tensor> prepareStore(const StorePlan& plan,
                                               std::vector<at::Tensor> tensors) const;
  // The samples at positions `local` ([B] int64, on the store's device) of a store whose
  // tensors are `store`: inputs cast to `inputType` and targets. Batch::sampleIndex is set by
  // the caller (local + the store's first sample) unless the layout sets it: a layout whose
  // sample numbers are not the file's rows sets the file's row of each sample.
  virtual Batch gather(const std::vector<at::Tensor>& store, const at::Tensor& local,
                       at::ScalarType inputType) const = 0;

  // The cost of each sample of `samples` (the train split), e.g. nodes per graph: the train
  // shards are then cut by cost, not count, and batches draw from each shard in proportion to
  // its length (Note [Weighted shards] in GlobalOrder.h), so every rank does about the same
  // work per step. Empty (the default): every sample costs the same.
  virtual std::vector<std::int64_t> sampleCosts(SampleRange /*samples*/) const { return {}; }

  // How much memory each sample of a store (tensors as prepareStore left them) takes in a
  // forward pass, relative to the others: [samples] int64 on the host (graphs: nodes + edges;
  // panel: instruments present), so the memory plan's trial takes the heaviest micro-batch
  // (Note [Memory plan]). Undefined (the default): every sample takes the same.
  virtual at::Tensor sampleWeights(const std::vector<at::Tensor>& /*store*/) const { return {}; }

  // Which targets of a store hold a value: bool, over the targets' leading dimensions (panel:
  // [dates, N], the instruments present). Undefined (the default): every one.
  virtual at::Tensor targetsPresent(const std::vector<at::Tensor>& /*store*/) const { return {}; }

 protected:
  explicit Layout(FileSchema schema) : schema_(std::move(schema)) {}

  // Pass 3 for one kInput read. Default: every value finite, rows named as samples.
  virtual void checkInput(const ReadSpec& read, const at::Tensor& values) const;
  // The read of schema().targets for `samples`: float32, or int64 class labels.
  ReadSpec targetsRead(SampleRange samples) const;

  FileSchema schema_;
};

// Pass 2 for rank `rank` of `worldSize`: samples [r*N/W, (r+1)*N/W] (one sample of overlap,
// so that the slices join).
void checkIndexSlice(hid_t file, const Layout& layout, int rank, int worldSize);

// Identifies the file's content: name, layout, shapes, dtypes, time range, and a hash of a
// few evenly spaced rows of every dataset. Equal on every rank that sees the same file.
std::string fingerprint(hid_t file, const Layout& layout, IndexReader& index);

// Value checks the layouts share (pass 3). `rowName(row)` names a row of `read` in messages
// ("sample 12", "row 40 of stream m5"), in the file's numbering.
void requireFinite(const FileSchema& schema, const ReadSpec& read, const at::Tensor& values,
                   const std::function<std::string(std::int64_t fileRow)>& rowName);
void requireNonNegativeLabels(const FileSchema& schema, const ReadSpec& read,
                              const at::Tensor& labels);

}  // namespace mb::data
