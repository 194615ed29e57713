#pragma once
// Note [Content hash]
// What the data identity (Note [Data continuity]) hashes, so that every value of every row
// counts and the hash is the same however the rows are spread over ranks:
//  - A dataset's rows (along `axis`: the columns of a [2, E] edge list) are cut into units of U
//    rows, aligned at row 0: unit k holds rows [k*U, min((k+1)*U, rows)). U is fixed by the bytes
//    of one row: as many rows as fit in kUnitBytes, at least one.
//  - A unit's bytes are its rows' values as the run holds them (HashedDataset::type: the
//    resident dtype where a store reads the dataset, so data.resident_dtype for the inputs; the
//    file's natural type for datasets no store reads), C order. Its hash:
//      s    = sum over its 8-byte little-endian words w_i (the last one zero-padded) of
//             fmix(w_i + (i + 1) * G)
//      unit = fmix(s + fmix(fmix(kSeed + k) + bytes))
//    fmix is MurmurHash3's 64-bit finaliser, G = 0x9e3779b97f4a7c15, kSeed = 0x6d65676162617463,
//    sums mod 2^64. The words mix independently of each other, so the loop runs at GB/s; fmix is
//    a bijection, so a unit with any one word changed always hashes differently.
//  - A dataset's hash is the sum of its units' hashes, mod 2^64. A sum does not care about
//    order or grouping: any partition of the units over ranks adds up to the same hash. And the
//    hash of the first R rows of a grown dataset is its hash less the units from the one holding
//    row R on, plus that unit cut at R: the appended check reads only rows from there.
// A bf16 NaN counts as one value, 0x7fc0 (made so word by word, in the loop): rounding to bf16
// gives NaNs other bits on a GPU and in LibTorch's vectorised CPU loop (0xffff), depending on
// where a value falls.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "common/Hdf5.h"
#include "data/pipeline/GlobalOrder.h"

namespace mb::data {

constexpr std::int64_t kUnitBytes = 4096;

// One dataset as the identity hashes it.
struct HashedDataset {
  std::string path;                // inside the file, no leading '/'
  std::vector<std::int64_t> dims;  // the file's shape
  std::string fileType;            // the file's dtype ("float32")
  at::ScalarType type = at::kFloat;
  int axis = 0;         // the dimension rows run along
  int sinceScheme = 1;  // the first identity scheme that lists it (Note [Data continuity])

  std::int64_t rows() const { return dims.empty() ? 0 : dims[axis]; }
  std::int64_t rowBytes() const;
  std::int64_t unitRows() const;
  std::int64_t units() const;
  // The rows of units `units`.
  ItemRange rowsOf(ItemRange units) const;
  // The units that lie wholly inside `rows` (the last unit may be shorter than U).
  ItemRange unitsWithin(ItemRange rows) const;
};

// "float32", "bfloat16", "int64", "uint8": the dtype a hash was taken over, for the identity.
std::string heldTypeName(at::ScalarType type);
std::optional<at::ScalarType> heldTypeNamed(const std::string& name);

// The hash of unit `unit` holding `size` bytes, taken as they are (hashUnits first makes each
// bf16 NaN of a bf16 dataset 0x7fc0).
std::uint64_t hashUnit(std::int64_t unit, const void* bytes, std::size_t size);

// The sum of the hashes of the units of `d` that `rows` holds: its row 0 is the first row of
// unit `firstUnit`, and it holds whole units (as d.type, along dim 0; on any device).
std::uint64_t hashUnits(const HashedDataset& d, std::int64_t firstUnit, const at::Tensor& rows);

// The same for units `units` of `d`, read from the open `file` in pieces of at most 32 MiB, each
// converted as the loader converts it (Note [Collective reads]). `read(bytes)` hears of each.
std::uint64_t hashFileUnits(hid_t file, const HashedDataset& d, ItemRange units,
                            const std::function<void(std::int64_t bytes)>& read = {});

// Rows `rows` of `d` from its open `dataset` as the loader holds them ([rows, ...] along dim 0);
// `what` names it in errors.
at::Tensor readAsHeld(hid_t dataset, const HashedDataset& d, ItemRange rows,
                      const std::string& what);

}  // namespace mb::data
