// Datasets as tensors: their shape and element type (DatasetInfo), the dtype each loads as, and
// whole or row-range reads and writes (the declarations are in Hdf5.h, "--- tensors").
#include <algorithm>
#include <cstring>

#include <ATen/Functions.h>

#include "common/Check.h"
#include "common/Hdf5.h"
#include "common/Strings.h"

namespace mb::h5 {
namespace {

using detail::fail;

hid_t halfType() {
  // HDF5 1.10 has no predefined float16; this is IEEE binary16, which h5py writes for float16.
  static const hid_t type = [] {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    H5Tlock(t);
    return t;
  }();
  return type;
}

std::vector<hsize_t> toHsize(const std::vector<std::int64_t>& dims) {
  return std::vector<hsize_t>(dims.begin(), dims.end());
}

std::vector<std::int64_t> tensorDims(const at::Tensor& tensor) {
  return std::vector<std::int64_t>(tensor.sizes().begin(), tensor.sizes().end());
}

}  // namespace

std::string DatasetInfo::typeName() const {
  switch (typeClass) {
    case H5T_FLOAT:
      return "float" + std::to_string(typeSize * 8);
    case H5T_INTEGER:
      return (isSigned ? "int" : "uint") + std::to_string(typeSize * 8);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum (e.g. bool)";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_REFERENCE:
      return "reference";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "variable-length";
    default:
      return "unknown";
  }
}

DatasetInfo describe(hid_t dataset) {
  DatasetInfo info;
  Handle space(H5Dget_space(dataset), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(std::max(rank, 0));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  info.dims.assign(dims.begin(), dims.end());
  Handle type(H5Dget_type(dataset), H5Tclose);
  info.typeClass = H5Tget_class(type.get());
  info.typeSize = H5Tget_size(type.get());
  if (info.typeClass == H5T_INTEGER) info.isSigned = H5Tget_sign(type.get()) == H5T_SGN_2;
  Handle plist(H5Dget_create_plist(dataset), H5Pclose);
  if (H5Pget_layout(plist.get()) == H5D_CHUNKED) {
    std::vector<hsize_t> chunk(std::max(rank, 1));
    int chunkRank = H5Pget_chunk(plist.get(), static_cast<int>(chunk.size()), chunk.data());
    info.chunkDims.assign(chunk.begin(), chunk.begin() + std::max(chunkRank, 0));
  }
  int filters = H5Pget_nfilters(plist.get());
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0, config = 0;
    size_t elements = 0;
    H5Z_filter_t filter =
        H5Pget_filter2(plist.get(), i, &flags, &elements, nullptr, 0, nullptr, &config);
    if (filter == H5Z_FILTER_DEFLATE) info.gzip = true;
    if (filter == H5Z_FILTER_FLETCHER32) info.fletcher32 = true;
  }
  return info;
}

at::ScalarType naturalScalarType(const DatasetInfo& info, ExitCode code, const std::string& what) {
  if (info.typeClass == H5T_FLOAT) {
    if (info.typeSize == 2) return at::kHalf;
    if (info.typeSize == 4) return at::kFloat;
    if (info.typeSize == 8) return at::kDouble;
  } else if (info.typeClass == H5T_INTEGER) {
    switch (info.typeSize) {
      case 1:
        return info.isSigned ? at::kChar : at::kByte;
      case 2:
        return info.isSigned ? at::kShort : at::kInt;
      case 4:
        return info.isSigned ? at::kInt : at::kLong;
      case 8:
        return at::kLong;
    }
  }
  throw makeError(code, what + ": expected a numeric dtype, found " + info.typeName(),
                  "store numbers as float16/32/64 or integers; see docs/data-format.md");
}

hid_t memoryType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return H5T_NATIVE_FLOAT;
    case at::kDouble:
      return H5T_NATIVE_DOUBLE;
    case at::kHalf:
      return halfType();
    case at::kChar:
      return H5T_NATIVE_INT8;
    case at::kByte:
    case at::kBool:
      return H5T_NATIVE_UINT8;
    case at::kShort:
      return H5T_NATIVE_INT16;
    case at::kInt:
      return H5T_NATIVE_INT32;
    case at::kLong:
      return H5T_NATIVE_INT64;
    default:
      throw RuntimeError(std::string("no HDF5 memory type for dtype ") + c10::toString(type));
  }
}

// --- tensors -----------------------------------------------------------------

void writeTensor(hid_t loc, const std::string& name, const at::Tensor& tensor,
                 const WriteOptions& options, ExitCode code) {
  at::Tensor data = tensor.detach().to(at::kCPU);
  if (data.scalar_type() == at::kBFloat16) data = data.to(at::kFloat);
  data = data.contiguous();
  std::vector<hsize_t> dims = toHsize(tensorDims(data));
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  bool filtered = options.fletcher32 || options.gzipLevel > 0 || options.chunkRows > 0;
  if (dims.empty()) {
    // A scalar cannot be chunked; the compact layout keeps it inside the object header, whose
    // checksum (latest file format) covers it.
    H5Pset_layout(dcpl.get(), H5D_COMPACT);
  } else if (filtered) {
    std::vector<hsize_t> chunk = dims;
    for (auto& d : chunk)
      d = std::max<hsize_t>(d, 1);
    hsize_t rowBytes = data.element_size();
    for (std::size_t i = 1; i < chunk.size(); ++i)
      rowBytes *= chunk[i];
    hsize_t rows = options.chunkRows > 0
                       ? static_cast<hsize_t>(options.chunkRows)
                       : std::max<hsize_t>(1, (hsize_t{1} << 20) / std::max<hsize_t>(rowBytes, 1));
    chunk[0] = std::min(chunk[0], rows);
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (options.gzipLevel > 0) {
      H5Pset_shuffle(dcpl.get());
      H5Pset_deflate(dcpl.get(), static_cast<unsigned>(options.gzipLevel));
    }
    if (options.fletcher32) H5Pset_fletcher32(dcpl.get());
  }
  hid_t type = memoryType(data.scalar_type());
  Handle dataset(
      H5Dcreate2(loc, name.c_str(), type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
      H5Dclose);
  if (!dataset.valid()) fail(code, fileNameOf(loc) + ": cannot create dataset " + name);
  if (data.numel() > 0 &&
      H5Dwrite(dataset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data_ptr()) < 0)
    fail(code, fileNameOf(loc) + ": cannot write dataset " + name);
  dataset.close(code, fileNameOf(loc) + " dataset " + name);
}

at::Tensor readTensor(hid_t loc, const std::string& name, ExitCode code, at::ScalarType as) {
  Handle dataset = openDataset(loc, name, code);
  DatasetInfo info = describe(dataset.get());
  std::string what = fileNameOf(loc) + ": dataset /" + name;
  at::ScalarType type = as == at::ScalarType::Undefined ? naturalScalarType(info, code, what) : as;
  if (info.typeClass != H5T_FLOAT && info.typeClass != H5T_INTEGER)
    naturalScalarType(info, code, what);
  at::Tensor out = at::empty(info.dims, at::TensorOptions().dtype(type));
  if (out.numel() > 0 &&
      H5Dread(dataset.get(), memoryType(type), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data_ptr()) < 0)
    fail(code, what + ": cannot read (the file may be corrupt or truncated)");
  return out;
}

at::Tensor readRows(hid_t dataset, std::int64_t begin, std::int64_t end, at::ScalarType as,
                    ExitCode code, const std::string& what, hid_t transfer) {
  DatasetInfo info = describe(dataset);
  if (info.dims.empty())
    throw makeError(code, what + ": a scalar (or empty) dataset has no rows to read");
  std::vector<std::int64_t> shape = info.dims;
  shape[0] = end - begin;
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(as));
  readRowsInto(dataset, begin, end, out, code, what, transfer);
  return out;
}

void readRowsInto(hid_t dataset, std::int64_t begin, std::int64_t end, at::Tensor& out,
                  ExitCode code, const std::string& what, hid_t transfer, int axis) {
  Handle fileSpace(H5Dget_space(dataset), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(fileSpace.get());
  if (rank < 1) throw makeError(code, what + ": a scalar (or empty) dataset has no rows to read");
  if (axis < 0 || axis >= rank)
    throw makeError(code, what + ": cannot read along dimension " + std::to_string(axis) +
                              " of a " + std::to_string(rank) + "-dimensional dataset");
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(fileSpace.get(), dims.data(), nullptr);
  const char* unit = axis == 0 ? "rows" : "columns";
  if (begin < 0 || end < begin || static_cast<hsize_t>(end) > dims[axis])
    throw makeError(code, what + ": " + unit + " [" + std::to_string(begin) + ", " +
                              std::to_string(end) + ") are outside the dataset's " +
                              std::to_string(dims[axis]) + " " + unit);
  std::vector<hsize_t> start(rank, 0), count = dims;
  start[axis] = static_cast<hsize_t>(begin);
  count[axis] = static_cast<hsize_t>(end - begin);
  Handle memSpace(H5Screate_simple(rank, count.data(), nullptr), H5Sclose);
  if (count[axis] == 0) {
    // Collective reads need every rank in H5Dread, even with nothing to read.
    H5Sselect_none(fileSpace.get());
    H5Sselect_none(memSpace.get());
  } else {
    H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                        nullptr);
  }
  if (H5Dread(dataset, memoryType(out.scalar_type()), memSpace.get(), fileSpace.get(), transfer,
              out.numel() > 0 ? out.data_ptr() : nullptr) < 0)
    fail(code, what + ": read of " + unit + " [" + std::to_string(begin) + ", " +
                   std::to_string(end) + ") failed (the file may be corrupt or truncated)");
}

}  // namespace mb::h5
