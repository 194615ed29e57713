#include "data/pipeline/Reader.h"

#include <algorithm>
#include <tuple>

#include <ATen/Functions.h>

#include "common/WorkProgress.h"

namespace mb::data {
namespace {

std::vector<std::int64_t> pieceShape(const at::Tensor& out, std::int64_t rows, int axis) {
  std::vector<std::int64_t> shape(out.sizes().begin(), out.sizes().end());
  shape[axis] = rows;
  return shape;
}

// A piece along dimension 0 of a contiguous tensor is contiguous; along dimension 1 it is not.
bool fillsInPlace(const at::Tensor& out, int axis) {
  return axis == 0 && out.device().is_cpu() && out.is_contiguous() &&
         out.scalar_type() != at::kBFloat16;
}

}  // namespace

RowReader::RowReader(hid_t file, hid_t transfer, bool collective, std::int64_t pieceBytes)
    : file_(file), transfer_(transfer), collective_(collective), pieceBytes_(pieceBytes) {}

void RowReader::read(const std::string& path, const std::vector<ItemRange>& allRanks, int rank,
                     at::Tensor& out, int axis) {
  std::string what = h5::fileNameOf(file_) + ": dataset /" + path;
  h5::Handle dataset = h5::openDataset(file_, path, ExitCode::kData);
  std::int64_t rowElements = 1;
  for (std::int64_t i = 0; i < out.dim(); ++i) {
    if (i != axis) rowElements *= out.size(i);
  }
  std::int64_t rowBytes =
      std::max<std::int64_t>(1, rowElements) * std::max<std::int64_t>(4, out.element_size());
  std::int64_t pieceRows = std::max<std::int64_t>(1, pieceBytes_ / rowBytes);
  auto piecesOf = [&](const ItemRange& r) { return (r.size() + pieceRows - 1) / pieceRows; };

  const ItemRange& mine = allRanks.at(rank);
  std::int64_t pieces = piecesOf(mine);
  if (collective_) {
    for (const auto& r : allRanks)
      pieces = std::max(pieces, piecesOf(r));
  }
  for (std::int64_t k = 0; k < pieces; ++k) {
    std::int64_t begin = std::min(mine.end, mine.begin + k * pieceRows);
    std::int64_t end = std::min(mine.end, begin + pieceRows);
    if (error_) begin = end = mine.end;  // keep taking part in the collective reads
    if (begin == end && !collective_) continue;
    try {
      readPiece(dataset.get(), what, begin, end, out, begin - mine.begin, axis);
    } catch (const Error& e) {
      if (!error_) error_ = e;
    } catch (const std::exception& e) {
      if (!error_) error_ = DataError(what + ": " + e.what());
    }
  }
}

void RowReader::read(const std::string& path, const std::vector<ItemRange>& allRanks, int rank,
                     at::Tensor& out, int axis, RowCache* cache, const std::string& key) {
  if (cache == nullptr || axis != 0) {
    read(path, allRanks, rank, out, axis);
    return;
  }
  const RowCache::Held* held = cache->find(key);
  const bool usable = held != nullptr && held->ranges.size() == allRanks.size() &&
                      held->rows.scalar_type() == out.scalar_type() &&
                      held->rows.sizes().slice(1).equals(out.sizes().slice(1));
  std::vector<ItemRange> before(allRanks.size()), after(allRanks.size());
  for (std::size_t r = 0; r < allRanks.size(); ++r) {
    const ItemRange have = usable ? held->ranges[r] : ItemRange{};
    std::tie(before[r], after[r]) = rowsLacking(allRanks[r], have);
  }
  const ItemRange& need = allRanks.at(rank);
  at::Tensor head = out.narrow(0, 0, before[rank].size());
  read(path, before, rank, head);
  at::Tensor tail = out.narrow(0, after[rank].begin - need.begin, after[rank].size());
  read(path, after, rank, tail);
  const ItemRange kept{before[rank].end, after[rank].begin};
  if (kept.size() > 0) {
    out.narrow(0, kept.begin - need.begin, kept.size())
        .copy_(held->rows.narrow(0, kept.begin - held->ranges[rank].begin, kept.size()));
    bytesKept_ += kept.size() * (out.numel() / std::max<std::int64_t>(1, out.size(0))) *
                  static_cast<std::int64_t>(out.element_size());
  }
  // Host rows are shared with the resident data, which nothing writes to after the load.
  if (!error_) cache->keep(key, {allRanks, out.device().is_cpu() ? out : out.to(at::kCPU)});
}

void RowReader::readPiece(hid_t dataset, const std::string& what, std::int64_t begin,
                          std::int64_t end, const at::Tensor& out, std::int64_t offset, int axis) {
  std::int64_t rows = end - begin;
  at::Tensor slice = out.narrow(axis, std::min(offset, out.size(axis)), rows);
  if (fillsInPlace(out, axis)) {
    h5::readRowsInto(dataset, begin, end, slice, ExitCode::kData, what, transfer_);
  } else {
    at::ScalarType type = out.scalar_type() == at::kBFloat16 ? at::kFloat : out.scalar_type();
    auto options = at::TensorOptions().dtype(type).pinned_memory(out.device().is_cuda());
    at::Tensor stage = at::empty(pieceShape(out, rows, axis), options);
    h5::readRowsInto(dataset, begin, end, stage, ExitCode::kData, what, transfer_, axis);
    if (rows > 0) slice.copy_(stage, /*non_blocking=*/out.device().is_cuda());
  }
  bytesRead_ += rows * (out.numel() / std::max<std::int64_t>(1, out.size(axis))) *
                static_cast<std::int64_t>(out.element_size());
  if (progress_) progress_->update(bytesRead_);
}

void RowReader::throwIfFailed() const {
  if (error_) throw *error_;
}

}  // namespace mb::data
