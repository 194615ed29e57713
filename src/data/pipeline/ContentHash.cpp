#include "data/pipeline/ContentHash.h"

#include <algorithm>
#include <cstring>
#include <functional>

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

// A bf16 NaN made one value, 0x7fc0, in each of a word's four lanes: a lane holds a NaN when its
// bits but the sign exceed 0x7f80 (an infinity), i.e. when adding 0x7f to them carries into bit
// 15 (it never carries into the next lane).
inline std::uint64_t oneBf16Nan(std::uint64_t word) {
  const std::uint64_t magnitude = word & 0x7fff7fff7fff7fffULL;
  const std::uint64_t nan = ((magnitude + 0x007f007f007f007fULL) & 0x8000800080008000ULL) >> 15;
  const std::uint64_t lanes = nan * 0xffff;
  return (word & ~lanes) | (0x7fc07fc07fc07fc0ULL & lanes);
}

template <bool kBf16>
std::uint64_t hashUnitOf(std::int64_t unit, const unsigned char* p, std::size_t size) {
  const std::size_t words = size / 8;
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t word;
    std::memcpy(&word, p + 8 * i, 8);
    sum += fmix((kBf16 ? oneBf16Nan(word) : word) + (i + 1) * kGolden);
  }
  if (size % 8 != 0) {
    std::uint64_t word = 0;
    std::memcpy(&word, p + 8 * words, size % 8);
    sum += fmix((kBf16 ? oneBf16Nan(word) : word) + (words + 1) * kGolden);
  }
  return fmix(sum + fmix(fmix(kContentSeed + static_cast<std::uint64_t>(unit)) + size));
}

// The units of `rows` rows of `rowBytes` bytes each at `data`, the first being unit `firstUnit`.
template <bool kBf16>
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
          sum += hashUnitOf<kBf16>(firstUnit + k, data + first * rowBytes,
                                   static_cast<std::size_t>(n * rowBytes));
        }
        return sum;
      },
      std::plus<std::uint64_t>());
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
  return hashUnitOf<false>(unit, static_cast<const unsigned char*>(bytes), size);
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
    const at::Tensor piece = rows.narrow(0, begin, std::min(pieceRows, rows.size(0) - begin))
                                 .to(at::kCPU)
                                 .contiguous();  // no copy when it is already
    const auto* bytes = static_cast<const unsigned char*>(piece.data_ptr());
    const std::int64_t unit = firstUnit + begin / unitRows;
    sum += d.type == at::kBFloat16
               ? hashRowBytes<true>(bytes, piece.size(0), rowBytes, unitRows, unit)
               : hashRowBytes<false>(bytes, piece.size(0), rowBytes, unitRows, unit);
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
