#include "data/pipeline/ContentHash.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include "common/Error.h"
#include "common/Strings.h"

namespace mb::data {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "Note [Content hash] reads words little-endian: add a byte swap for this host");

constexpr std::uint64_t kContentSeed = 0x6d65676162617463ULL;  // "megabatc"
constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
constexpr std::int64_t kPieceBytes = std::int64_t{32} << 20;  // read and copied at a time
constexpr std::int64_t kGrainBytes = std::int64_t{1} << 20;   // hashed per thread at a time

// MurmurHash3's 64-bit finaliser: a bijection that mixes every bit into every other.
inline std::uint64_t fmix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// The units of `rows` rows of `rowBytes` bytes each at `data`, the first being unit `firstUnit`.
std::uint64_t hashRowBytes(const unsigned char* data, std::int64_t rows, std::int64_t rowBytes,
                           std::int64_t unitRows, std::int64_t firstUnit) {
  const std::int64_t units = (rows + unitRows - 1) / unitRows;
  const std::int64_t grain = std::max<std::int64_t>(1, kGrainBytes / (unitRows * rowBytes));
  return at::parallel_reduce(
      0, units, grain, std::uint64_t{0},
      [&](std::int64_t begin, std::int64_t end, std::uint64_t sum) {
        for (std::int64_t k = begin; k < end; ++k) {
          const std::int64_t first = k * unitRows;
          const std::int64_t n = std::min(unitRows, rows - first);
          sum += hashUnit(firstUnit + k, data + first * rowBytes,
                          static_cast<std::size_t>(n * rowBytes));
        }
        return sum;
      },
      std::plus<std::uint64_t>());
}

// A piece of held rows as contiguous host bytes, NaNs made one value (Note [Content hash]).
at::Tensor hostBytes(at::Tensor piece) {
  if (piece.scalar_type() == at::kBFloat16) {
    at::Tensor nan = at::isnan(piece);
    if (nan.any().item<bool>())
      piece = piece.masked_fill(nan, std::numeric_limits<float>::quiet_NaN());
  }
  return piece.to(at::kCPU).contiguous();
}

}  // namespace

std::int64_t HashedDataset::rowBytes() const {
  std::int64_t elements = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (static_cast<int>(i) != axis) elements *= dims[i];
  }
  return elements * static_cast<std::int64_t>(c10::elementSize(type));
}

std::int64_t HashedDataset::unitRows() const {
  return std::max<std::int64_t>(1, kUnitBytes / std::max<std::int64_t>(1, rowBytes()));
}

std::int64_t HashedDataset::units() const {
  return (rows() + unitRows() - 1) / unitRows();
}

ItemRange HashedDataset::rowsOf(ItemRange units) const {
  return {std::min(rows(), units.begin * unitRows()), std::min(rows(), units.end * unitRows())};
}

ItemRange HashedDataset::unitsWithin(ItemRange rows) const {
  if (rows.size() <= 0) return {};
  const std::int64_t u = unitRows();
  const std::int64_t begin = (rows.begin + u - 1) / u;
  const std::int64_t end = rows.end >= this->rows() ? units() : rows.end / u;
  return {begin, std::max(begin, end)};
}

std::string heldTypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kByte:
      return "uint8";
    case at::kChar:
      return "int8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(type);
  }
}

std::optional<at::ScalarType> heldTypeNamed(const std::string& name) {
  for (at::ScalarType type : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kByte,
                              at::kChar, at::kShort, at::kInt, at::kLong, at::kBool}) {
    if (heldTypeName(type) == name) return type;
  }
  return std::nullopt;
}

std::uint64_t hashUnit(std::int64_t unit, const void* bytes, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  const std::size_t words = size / 8;
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t word;
    std::memcpy(&word, p + 8 * i, 8);
    sum += fmix(word + (i + 1) * kGolden);
  }
  if (size % 8 != 0) {
    std::uint64_t word = 0;
    std::memcpy(&word, p + 8 * words, size % 8);
    sum += fmix(word + (words + 1) * kGolden);
  }
  return fmix(sum + fmix(fmix(kContentSeed + static_cast<std::uint64_t>(unit)) + size));
}

std::uint64_t hashUnits(const HashedDataset& d, std::int64_t firstUnit, const at::Tensor& rows) {
  if (rows.dim() == 0 || rows.size(0) == 0) return 0;
  const std::int64_t rowBytes = d.rowBytes();
  if (rows.scalar_type() != d.type ||
      rows.numel() / rows.size(0) * static_cast<std::int64_t>(rows.element_size()) != rowBytes)
    throw RuntimeError("content hash of /" + d.path + ": rows of " +
                       heldTypeName(rows.scalar_type()) + " " + str::shapeText(rows.sizes().vec()) +
                       " do not fit its " + heldTypeName(d.type) + " rows of " +
                       std::to_string(rowBytes) + " bytes");
  const std::int64_t unitRows = d.unitRows();
  const std::int64_t pieceRows =
      std::max<std::int64_t>(1, kPieceBytes / (unitRows * rowBytes)) * unitRows;
  std::uint64_t sum = 0;
  for (std::int64_t begin = 0; begin < rows.size(0); begin += pieceRows) {
    at::Tensor piece = hostBytes(rows.narrow(0, begin, std::min(pieceRows, rows.size(0) - begin)));
    sum += hashRowBytes(static_cast<const unsigned char*>(piece.data_ptr()), piece.size(0),
                        rowBytes, unitRows, firstUnit + begin / unitRows);
  }
  return sum;
}

at::Tensor readAsHeld(hid_t dataset, const HashedDataset& d, ItemRange rows,
                      const std::string& what) {
  std::vector<std::int64_t> shape = d.dims;
  shape[d.axis] = rows.size();
  // As RowReader stages them: bf16 is read as float32, then rounded by a copy.
  at::Tensor out = at::empty(shape, d.type == at::kBFloat16 ? at::kFloat : d.type);
  h5::readRowsInto(dataset, rows.begin, rows.end, out, ExitCode::kData, what, H5P_DEFAULT, d.axis);
  return out.transpose(0, d.axis).contiguous().to(d.type);
}

std::uint64_t hashFileUnits(hid_t file, const HashedDataset& d, ItemRange units,
                            const std::function<void(std::int64_t bytes)>& read) {
  if (units.size() <= 0) return 0;
  const std::string what = h5::fileNameOf(file) + ": dataset /" + d.path;
  h5::Handle dataset = h5::openDataset(file, d.path, ExitCode::kData);
  const std::int64_t step =
      std::max<std::int64_t>(1, kPieceBytes / (d.unitRows() * d.rowBytes()));  // units a piece
  std::uint64_t sum = 0;
  for (std::int64_t k = units.begin; k < units.end; k += step) {
    const ItemRange piece{k, std::min(units.end, k + step)};
    at::Tensor rows = readAsHeld(dataset.get(), d, d.rowsOf(piece), what);
    sum += hashUnits(d, piece.begin, rows);
    if (read) read(rows.numel() * static_cast<std::int64_t>(rows.element_size()));
  }
  return sum;
}

}  // namespace mb::data
