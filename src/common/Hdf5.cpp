#include "common/Hdf5.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include <ATen/Functions.h>

#include "common/Check.h"
#include "common/Hdf5External.h"
#include "common/Strings.h"

namespace mb::h5 {

namespace detail {

void fail(ExitCode code, const std::string& message, const std::string& hint) {
  std::string stack = mb::detail::hdf5ErrorStack();
  throw makeError(code, stack.empty() ? message : message + " (HDF5: " + stack + ")", hint);
}

}  // namespace detail

namespace {

using detail::fail;

bool fileExists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

herr_t collectName(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

H5I_type_t objectType(hid_t loc, const std::string& path) {
  if (!exists(loc, path)) return H5I_BADID;  // also refuses external links (checkLinks)
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
  // H5Lexists traverses every component but the last: an external link there would open
  // another file, so links are checked from the root down first.
  checkLinks(loc, path, ExitCode::kData);
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
  checkLinks(loc, path, code);
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
  checkLinks(loc, path, code);
  if (!isDataset(loc, path))
    throw makeError(code, fileNameOf(loc) + ": dataset /" + path + " is missing",
                    "see docs/data-format.md for the datasets each layout needs");
  hid_t dataset = H5Dopen2(loc, path.c_str(), H5P_DEFAULT);
  if (dataset < 0) fail(code, fileNameOf(loc) + ": cannot open dataset /" + path);
  Handle handle(dataset, H5Dclose);
  checkStorage(handle.get(), fileNameOf(loc) + ": /" + path, code);
  return handle;
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

namespace {

void writeArrayAttribute(hid_t object, const std::string& name, hid_t type, const void* values,
                         std::size_t count, ExitCode code) {
  if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
  const hsize_t dims[1] = {count};
  Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  Handle attribute(H5Acreate2(object, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose);
  if (!attribute.valid() || H5Awrite(attribute.get(), type, values) < 0)
    fail(code, fileNameOf(object) + ": cannot write attribute " + name);
}

}  // namespace

void writeAttribute(hid_t object, const std::string& name, const std::vector<double>& values,
                    ExitCode code) {
  writeArrayAttribute(object, name, H5T_NATIVE_DOUBLE, values.data(), values.size(), code);
}

void writeAttribute(hid_t object, const std::string& name, const std::vector<std::int64_t>& values,
                    ExitCode code) {
  writeArrayAttribute(object, name, H5T_NATIVE_INT64, values.data(), values.size(), code);
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

template <class T>
std::vector<T> readArrayAttribute(hid_t object, const std::string& name, std::size_t maxValues,
                                  ExitCode code) {
  if (H5Aexists(object, name.c_str()) <= 0)
    throw makeError(code, fileNameOf(object) + ": attribute '" + name + "' is missing");
  Handle attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!attribute.valid()) fail(code, fileNameOf(object) + ": cannot open attribute " + name);
  Handle space(H5Aget_space(attribute.get()), H5Sclose);
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  const hssize_t values = H5Sget_simple_extent_npoints(space.get());
  const H5T_class_t typeClass = H5Tget_class(type.get());
  if (rank < 0 || rank > 1 || values < 0 || static_cast<std::size_t>(values) > maxValues)
    throw makeError(code, fileNameOf(object) + ": attribute '" + name + "' holds " +
                              std::to_string(values) + " values in " + std::to_string(rank) +
                              " dimension(s), expected at most " + std::to_string(maxValues) +
                              " in one");
  if (typeClass != H5T_FLOAT && typeClass != H5T_INTEGER)
    throw makeError(code, fileNameOf(object) + ": attribute '" + name + "' is not numeric");
  std::vector<T> out(static_cast<std::size_t>(values));
  const hid_t memory = std::is_same_v<T, double> ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
  if (!out.empty() && H5Aread(attribute.get(), memory, out.data()) < 0)
    fail(code, fileNameOf(object) + ": cannot read attribute " + name);
  return out;
}

template std::vector<double> readArrayAttribute<double>(hid_t, const std::string&, std::size_t,
                                                        ExitCode);
template std::vector<std::int64_t> readArrayAttribute<std::int64_t>(hid_t, const std::string&,
                                                                    std::size_t, ExitCode);

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
