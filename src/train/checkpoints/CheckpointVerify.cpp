// Note [Checkpoints are untrusted input] (CheckpointVerify.h): the walk that checks a checkpoint
// before anything of it is read.
#include "train/checkpoints/CheckpointVerify.h"

#include <sys/stat.h>

#include <set>
#include <sstream>

#include "common/Check.h"
#include "common/Hdf5.h"
#include "common/Hdf5External.h"
#include "common/Strings.h"

namespace mb::train {
namespace {

constexpr ExitCode kVerifyCode = ExitCode::kCheckpoint;
const char* kHint =
    "megabatch refuses checkpoints it did not write; use one a megabatch run wrote (an older "
    "step-N.h5 of the same run directory), and `megabatch inspect` to see what a file holds";

[[noreturn]] void hostile(const std::string& file, const std::string& what) {
  throw HostileCheckpointError(file + ": " + what + ": not written by megabatch, or rewritten",
                               kHint);
}

// HDF5 could not read what should be there: a damaged file rather than an edited one.
[[noreturn]] void corrupt(const std::string& file, const std::string& what) {
  throw CheckpointError(file + ": " + what + " (HDF5: " + mb::detail::hdf5ErrorStack() + ")");
}

std::int64_t fileSize(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 ? static_cast<std::int64_t>(info.st_size) : 0;
}

struct ManifestEntry {
  std::string dtype;
  std::string shape;
  std::int64_t bytes = 0;
};

struct Walk {
  std::string file;
  std::int64_t fileBytes = 0;
  const ExpectedTensors* expected = nullptr;
  bool manifest = false;
  std::map<std::string, ManifestEntry> entries;
  std::set<std::string> seen;
  std::int64_t total = 0;
  std::vector<CheckedTensor> out;
};

std::map<std::string, ManifestEntry> parseManifest(const std::string& file,
                                                   const std::string& text) {
  std::map<std::string, ManifestEntry> entries;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> fields = str::split(line, '\t');
    ManifestEntry entry;
    bool ok = fields.size() == 4;
    if (ok) {
      entry.dtype = fields[1];
      entry.shape = fields[2];
      try {
        entry.bytes = std::stoll(fields[3]);
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok || !entries.emplace(fields[0], entry).second)
      hostile(file, "/meta manifest has a malformed or repeated line '" + line.substr(0, 80) + "'");
  }
  return entries;
}

// Dimensions past int64 and byte counts past 2^63 are refused here, so every later product and
// sum fits; nothing here rounds dimensions up to chunks, where `d + c - 1` could overflow.
std::int64_t checkedBytes(const std::string& file, const std::string& where,
                          const std::vector<hsize_t>& dims, std::size_t typeSize) {
  std::int64_t bytes = static_cast<std::int64_t>(typeSize);
  for (hsize_t d : dims) {
    if (d > static_cast<hsize_t>(INT64_MAX) ||
        __builtin_mul_overflow(bytes, static_cast<std::int64_t>(d), &bytes))
      hostile(file, where + " declares a shape of more than 2^63 bytes");
  }
  return bytes;
}

void checkDataset(Walk& w, hid_t dataset, const std::string& path) {
  const std::string where = "/" + path;
  // Nothing outside the file: external storage and virtual datasets (no value is read here).
  h5::checkStorage(dataset, w.file + ": " + where, kVerifyCode);

  h5::Handle space(H5Dget_space(dataset), H5Sclose);
  if (!space.valid()) corrupt(w.file, where + ": its shape cannot be read");
  H5S_class_t spaceClass = space.valid() ? H5Sget_simple_extent_type(space.get()) : H5S_NO_CLASS;
  int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if ((spaceClass != H5S_SIMPLE && spaceClass != H5S_SCALAR) || rank < 0 || rank > H5S_MAX_RANK)
    hostile(w.file, where + " has no shape (a null or unreadable dataspace)");
  std::vector<hsize_t> hdims(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), hdims.data(), nullptr);
  H5Eclear2(H5E_DEFAULT);

  h5::DatasetInfo info = h5::describe(dataset);
  bool number = (info.typeClass == H5T_FLOAT &&
                 (info.typeSize == 2 || info.typeSize == 4 || info.typeSize == 8)) ||
                (info.typeClass == H5T_INTEGER && (info.typeSize == 1 || info.typeSize == 2 ||
                                                   info.typeSize == 4 || info.typeSize == 8));
  if (!number) hostile(w.file, where + " holds " + info.typeName() + " values, not numbers");
  std::int64_t bytes = checkedBytes(w.file, where, hdims, info.typeSize);
  std::vector<std::int64_t> dims(hdims.begin(), hdims.end());
  const std::string declared = shapeText(dims) + " " + info.typeName() + " (" +
                               str::humanBytes(static_cast<double>(bytes)) + ")";

  // The shape the reader expects: the model's, else the manifest's.
  if (w.expected != nullptr) {
    auto found = w.expected->tensors.find(path);
    if (found != w.expected->tensors.end() &&
        (found->second.first != dims || found->second.second != info.typeName()))
      hostile(w.file, where + " declares " + declared + ", but " + w.expected->source +
                          " expects " + shapeText(found->second.first) + " " +
                          found->second.second);
  }
  if (w.manifest) {
    auto found = w.entries.find(path);
    if (found == w.entries.end())
      hostile(w.file, where + " (" + declared + ") is not listed in the checkpoint's manifest");
    if (found->second.shape != shapeText(dims) || found->second.dtype != info.typeName() ||
        found->second.bytes != bytes)
      hostile(w.file, where + " declares " + declared + ", but the checkpoint's manifest says " +
                          found->second.shape + " " + found->second.dtype);
  }
  // Checkpoints are not compressed: every tensor's bytes are in the file.
  if (__builtin_add_overflow(w.total, bytes, &w.total) || w.total > w.fileBytes)
    hostile(w.file, where + " declares " + declared + ", more than the file (" +
                        str::humanBytes(static_cast<double>(w.fileBytes)) +
                        ") holds with the tensors before it");

  // Checksums: chunked with Fletcher-32 and nothing else; scalars compact (header checksum).
  h5::Handle plist(H5Dget_create_plist(dataset), H5Pclose);
  H5D_layout_t layout = H5Pget_layout(plist.get());
  if (rank == 0) {
    if (layout != H5D_COMPACT)
      hostile(w.file, where + " is a scalar stored outside its checksummed object header");
  } else if (layout != H5D_CHUNKED) {
    hostile(w.file, where + " carries no Fletcher-32 checksum (" +
                        (layout == H5D_CONTIGUOUS ? std::string("contiguous, unchecked")
                                                  : std::string("not chunked")) +
                        " storage)");
  }
  int filters = H5Pget_nfilters(plist.get());
  bool fletcher = false;
  for (int i = 0; i < filters; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t elements = 0;
    char name[64] = {0};
    H5Z_filter_t filter = H5Pget_filter2(plist.get(), static_cast<unsigned>(i), &flags, &elements,
                                         nullptr, sizeof(name), name, &config);
    if (filter == H5Z_FILTER_FLETCHER32) {
      fletcher = true;
      continue;
    }
    hostile(w.file, where + " uses HDF5 filter " + std::to_string(filter) +
                        (name[0] ? std::string(" (") + name + ")" : std::string()) +
                        ", which megabatch never writes in a checkpoint (only Fletcher-32)");
  }
  if (rank > 0 && !fletcher)
    hostile(w.file, where +
                        " carries no Fletcher-32 checksum (megabatch writes one on every "
                        "tensor, so its values cannot be verified)");
  if (rank > 0 && bytes > 0) {
    hsize_t stored = H5Dget_storage_size(dataset);
    H5Eclear2(H5E_DEFAULT);
    if (stored < static_cast<hsize_t>(bytes))
      hostile(w.file, where + " declares " + declared + " but stores " + std::to_string(stored) +
                          " bytes (chunks missing: its values would be a fill value)");
  }
  w.out.push_back({path, dims, info.typeName(), bytes});
}

void walkGroup(Walk& w, hid_t group, const std::string& prefix) {
  if (!w.seen.insert(h5::objectKey(group, ".", kVerifyCode)).second)
    hostile(w.file, "group /" + prefix + " is linked more than once (a cycle)");
  for (const auto& name : h5::listGroup(group)) {
    const std::string path = prefix + name;
    std::string link = h5::describeLink(group, name);
    if (!link.empty()) hostile(w.file, "/" + path + " is " + link);
    h5::Handle object(H5Oopen(group, name.c_str(), H5P_DEFAULT), H5Oclose);
    if (!object.valid()) corrupt(w.file, "/" + path + " cannot be opened");
    H5I_type_t type = H5Iget_type(object.get());
    if (type == H5I_GROUP)
      walkGroup(w, object.get(), path + "/");
    else if (type == H5I_DATASET)
      checkDataset(w, object.get(), path);
    else
      hostile(w.file, "/" + path + " is neither a group nor a tensor");
  }
}

// `name` at the root must be a hard link to a group.
h5::Handle rootGroup(const std::string& file, hid_t root, const std::string& name) {
  if (H5Lexists(root, name.c_str(), H5P_DEFAULT) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw CheckpointError(file + ": group /" + name + " is missing");
  }
  std::string link = h5::describeLink(root, name);
  if (!link.empty()) hostile(file, "/" + name + " is " + link);
  h5::Handle group(H5Oopen(root, name.c_str(), H5P_DEFAULT), H5Oclose);
  if (!group.valid() || H5Iget_type(group.get()) != H5I_GROUP)
    hostile(file, "/" + name + " is not a group");
  return group;
}

}  // namespace

std::string shapeText(const std::vector<std::int64_t>& dims) {
  std::vector<std::string> parts;
  for (auto d : dims)
    parts.push_back(std::to_string(d));
  return "[" + str::join(parts, ", ") + "]";
}

std::string storedTypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
    case at::kBFloat16:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kChar:
      return "int8";
    case at::kByte:
    case at::kBool:
      return "uint8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    default:
      return c10::toString(type);
  }
}

bool hasManifest(hid_t file) {
  if (!h5::exists(file, "meta")) return false;
  h5::Handle meta = h5::openGroup(file, "meta", kVerifyCode);
  return h5::hasAttribute(meta.get(), "manifest");
}

std::string manifestText(const std::vector<CheckedTensor>& tensors) {
  std::string text;
  for (const auto& t : tensors)
    text +=
        t.path + "\t" + t.dtype + "\t" + shapeText(t.dims) + "\t" + std::to_string(t.bytes) + "\n";
  return text;
}

std::vector<CheckedTensor> verifyCheckpointTree(hid_t file, const std::string& path,
                                                const ExpectedTensors* expected,
                                                bool checkManifest) {
  Walk w;
  w.file = path;
  w.fileBytes = fileSize(path);
  w.expected = expected;
  h5::Handle meta = rootGroup(path, file, "meta");
  rootGroup(path, file, "trainer");
  if (checkManifest && h5::hasAttribute(meta.get(), "manifest")) {
    w.manifest = true;
    w.entries = parseManifest(path, h5::readStringAttribute(meta.get(), "manifest", kVerifyCode));
  }
  if (!checkManifest) w.fileBytes = INT64_MAX;  // the writer's image in memory
  for (const char* group : {"model", "optimizer", "extra"}) {
    h5::Handle handle = rootGroup(path, file, group);
    walkGroup(w, handle.get(), std::string(group) + "/");
  }
  if (h5::exists(file, "log_window")) {  // absent in older files (Note [Log windows ...])
    h5::Handle handle = rootGroup(path, file, "log_window");
    walkGroup(w, handle.get(), "log_window/");
  }
  if (w.manifest && w.entries.size() != w.out.size()) {
    std::set<std::string> found;
    for (const auto& t : w.out)
      found.insert(t.path);
    for (const auto& [name, entry] : w.entries)
      if (!found.count(name)) hostile(path, "/" + name + ", listed in its manifest, is missing");
  }
  return w.out;
}

}  // namespace mb::train
