#include "common/Hdf5.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include <ATen/Functions.h>

#include "common/Check.h"
#include "common/Strings.h"

namespace mb::h5 {
namespace {

[[noreturn]] void fail(ExitCode code, const std::string& message, const std::string& hint = {}) {
  std::string stack = detail::hdf5ErrorStack();
  throw makeError(code, stack.empty() ? message : message + " (HDF5: " + stack + ")", hint);
}

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

bool fileExists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

herr_t collectName(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

H5I_type_t objectType(hid_t loc, const std::string& path) {
  if (!exists(loc, path)) return H5I_BADID;
  hid_t object = H5Oopen(loc, path.c_str(), H5P_DEFAULT);
  if (object < 0) {
    H5Eclear2(H5E_DEFAULT);
    return H5I_BADID;
  }
  H5I_type_t type = H5Iget_type(object);
  H5Oclose(object);
  return type;
}

}  // namespace

std::recursive_mutex& libraryMutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

void silenceLibraryErrors() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = -1;
  }
  return *this;
}

void Handle::reset() {
  if (id_ >= 0 && closer_ != nullptr) closer_(id_);
  id_ = -1;
}

void Handle::close(ExitCode code, const std::string& what) {
  if (id_ < 0) return;
  herr_t status = closer_(id_);
  id_ = -1;
  if (status < 0) fail(code, "could not finish writing " + what);
}

// --- files -------------------------------------------------------------------

Handle openFile(const std::string& path, bool writable, ExitCode code, hid_t fapl) {
  silenceLibraryErrors();
  if (!fileExists(path)) throw makeError(code, path + ": no such file", "check the path");
  if (!isHdf5File(path))
    throw makeError(code,
                    path + ": not an HDF5 file (it may be empty, truncated, or another format)",
                    "write data files with h5py or `megabatch data`; see docs/data-format.md");
  hid_t file = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl);
  if (file < 0) fail(code, path + ": cannot open HDF5 file");
  return Handle(file, H5Fclose);
}

Handle createFile(const std::string& path, bool latestFormat, ExitCode code) {
  silenceLibraryErrors();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (latestFormat) H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get());
  if (file < 0)
    fail(code, path + ": cannot create HDF5 file",
         "check that the directory exists and is writable");
  return Handle(file, H5Fclose);
}

bool isHdf5File(const std::string& path) {
  silenceLibraryErrors();
  if (!fileExists(path)) return false;
  htri_t result = H5Fis_hdf5(path.c_str());
  H5Eclear2(H5E_DEFAULT);
  return result > 0;
}

// --- objects -------------------------------------------------------------------

bool exists(hid_t loc, const std::string& path) {
  std::string prefix;
  for (const auto& part : str::split(path, '/')) {
    if (part.empty()) continue;
    prefix += prefix.empty() ? part : "/" + part;
    htri_t present = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
    if (present <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  return !prefix.empty();
}

bool isGroup(hid_t loc, const std::string& path) {
  return objectType(loc, path) == H5I_GROUP;
}
bool isDataset(hid_t loc, const std::string& path) {
  return objectType(loc, path) == H5I_DATASET;
}

Handle openGroup(hid_t loc, const std::string& path, ExitCode code) {
  hid_t group = H5Gopen2(loc, path.c_str(), H5P_DEFAULT);
  if (group < 0) fail(code, fileNameOf(loc) + ": cannot open group /" + path);
  return Handle(group, H5Gclose);
}

Handle createGroup(hid_t loc, const std::string& path, ExitCode code) {
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  hid_t group = H5Gcreate2(loc, path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT);
  if (group < 0) fail(code, fileNameOf(loc) + ": cannot create group /" + path);
  return Handle(group, H5Gclose);
}

Handle openDataset(hid_t loc, const std::string& path, ExitCode code) {
  if (!isDataset(loc, path))
    throw makeError(code, fileNameOf(loc) + ": dataset /" + path + " is missing",
                    "see docs/data-format.md for the datasets each layout needs");
  hid_t dataset = H5Dopen2(loc, path.c_str(), H5P_DEFAULT);
  if (dataset < 0) fail(code, fileNameOf(loc) + ": cannot open dataset /" + path);
  return Handle(dataset, H5Dclose);
}

std::vector<std::string> listGroup(hid_t group) {
  std::vector<std::string> names;
  hsize_t index = 0;
  H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &index, collectName, &names);
  return names;
}

std::string objectKey(hid_t loc, const std::string& path, ExitCode code) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info;
  if (H5Oget_info_by_name3(loc, path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    fail(code, fileNameOf(loc) + ": cannot look up /" + path);
  char* token = nullptr;
  if (H5Otoken_to_str(loc, &info.token, &token) < 0)
    fail(code, fileNameOf(loc) + ": cannot look up /" + path);
  std::string address = token;
  H5free_memory(token);
#else
  H5O_info_t info;
  if (H5Oget_info_by_name2(loc, path.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    fail(code, fileNameOf(loc) + ": cannot look up /" + path);
  std::string address = std::to_string(info.addr);
#endif
  return std::to_string(info.fileno) + ":" + address;
}

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

// --- attributes ------------------------------------------------------------------

namespace {

void writeAttributeRaw(hid_t object, const std::string& name, hid_t type, const void* value,
                       ExitCode code) {
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle attribute(H5Acreate2(object, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose);
  if (!attribute.valid() || H5Awrite(attribute.get(), type, value) < 0)
    fail(code, fileNameOf(object) + ": cannot write attribute " + name);
}

// The readers below read exactly one value into a one-value buffer: an attribute holding an
// array (h5py writes lists that way) or nothing (a null dataspace) must be refused before
// H5Aread, which would write past the buffer or leave it unset.
Handle openAttribute(hid_t object, const std::string& name, ExitCode code) {
  if (H5Aexists(object, name.c_str()) <= 0)
    throw makeError(code, fileNameOf(object) + ": attribute '" + name + "' is missing");
  Handle attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) fail(code, fileNameOf(object) + ": cannot open attribute " + name);
  Handle space(H5Aget_space(attribute.get()), H5Sclose);
  hssize_t values = H5Sget_simple_extent_npoints(space.get());
  if (values != 1)
    throw makeError(code,
                    fileNameOf(object) + ": attribute '" + name + "' holds " +
                        std::to_string(values) + " values, expected a single value",
                    "write it as one value, e.g. with h5py: attrs['" + name + "'] = value");
  return attribute;
}

}  // namespace

void writeAttribute(hid_t object, const std::string& name, const std::string& value,
                    ExitCode code) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  const char* text = value.c_str();
  writeAttributeRaw(object, name, type.get(), &text, code);
}

void writeAttribute(hid_t object, const std::string& name, std::int64_t value, ExitCode code) {
  writeAttributeRaw(object, name, H5T_NATIVE_INT64, &value, code);
}

void writeAttribute(hid_t object, const std::string& name, double value, ExitCode code) {
  writeAttributeRaw(object, name, H5T_NATIVE_DOUBLE, &value, code);
}

bool hasAttribute(hid_t object, const std::string& name) {
  htri_t present = H5Aexists(object, name.c_str());
  H5Eclear2(H5E_DEFAULT);
  return present > 0;
}

std::string readStringAttribute(hid_t object, const std::string& name, ExitCode code) {
  Handle attribute = openAttribute(object, name, code);
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING)
    throw makeError(code, fileNameOf(object) + ": attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle memType(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(memType.get(), H5T_VARIABLE);
    H5Tset_cset(memType.get(), H5Tget_cset(type.get()));
    char* text = nullptr;
    if (H5Aread(attribute.get(), memType.get(), &text) < 0)
      fail(code, fileNameOf(object) + ": cannot read attribute " + name);
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  std::size_t size = H5Tget_size(type.get());
  std::string value(size, '\0');
  if (H5Aread(attribute.get(), type.get(), value.data()) < 0)
    fail(code, fileNameOf(object) + ": cannot read attribute " + name);
  value.resize(std::strlen(value.c_str()));
  return value;
}

std::int64_t readIntAttribute(hid_t object, const std::string& name, ExitCode code) {
  Handle attribute = openAttribute(object, name, code);
  std::int64_t value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_INT64, &value) < 0)
    fail(code, fileNameOf(object) + ": attribute '" + name + "' is not an integer");
  return value;
}

double readDoubleAttribute(hid_t object, const std::string& name, ExitCode code) {
  Handle attribute = openAttribute(object, name, code);
  double value = 0;
  if (H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, &value) < 0)
    fail(code, fileNameOf(object) + ": attribute '" + name + "' is not a number");
  return value;
}

std::string fileNameOf(hid_t object) {
  ssize_t length = H5Fget_name(object, nullptr, 0);
  if (length <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return "(hdf5)";
  }
  std::string name(static_cast<std::size_t>(length) + 1, '\0');
  H5Fget_name(object, name.data(), name.size());
  name.resize(static_cast<std::size_t>(length));
  return name;
}

}  // namespace mb::h5
