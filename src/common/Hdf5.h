#pragma once
// Thin RAII layer over the HDF5 C API, shared by the data reader, checkpoints, and tools.
//
// Threads: the parallel (MPI) build of HDF5 is not thread-safe. Code that calls HDF5 off the
// main thread (the stream-mode reader, checkpoint writes while it runs) holds libraryMutex()
// for every call sequence.
//
// Errors: every failure throws mb::Error with the exit code the caller passes (kData for data
// files, kCheckpoint for checkpoints), naming the file and object.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <hdf5.h>

#include "common/Error.h"

namespace mb::h5 {

namespace detail {
// Throws the Error of `code` for `message`, HDF5's error stack appended, with `hint`.
[[noreturn]] void fail(ExitCode code, const std::string& message, const std::string& hint = {});
}  // namespace detail

std::recursive_mutex& libraryMutex();
// Stops HDF5 from printing its error stack to stderr; our messages carry it instead.
void silenceLibraryErrors();

// Owns one hid_t and closes it with the matching H5?close function.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  // Closes now and reports failure (a close can fail when the disk is full).
  void close(ExitCode code, const std::string& what);

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// --- files -------------------------------------------------------------------

// Opens an existing file. `fapl` may be an MPI-IO access list (dist/ParallelIo.h).
Handle openFile(const std::string& path, bool writable, ExitCode code, hid_t fapl = H5P_DEFAULT);
// Creates (truncates) a file. `latestFormat` selects the newest on-disk format, whose
// metadata blocks carry checksums (used for checkpoints).
Handle createFile(const std::string& path, bool latestFormat, ExitCode code);
// True if `path` names an HDF5 file (H5Fis_hdf5), false for anything else or a missing file.
bool isHdf5File(const std::string& path);

// --- objects -------------------------------------------------------------------

// True if every component of `path` ("a/b/c") exists below `loc`.
bool exists(hid_t loc, const std::string& path);
bool isGroup(hid_t loc, const std::string& path);
bool isDataset(hid_t loc, const std::string& path);
Handle openGroup(hid_t loc, const std::string& path, ExitCode code);
// Creates the group and any missing parents.
Handle createGroup(hid_t loc, const std::string& path, ExitCode code);
Handle openDataset(hid_t loc, const std::string& path, ExitCode code);
// Names of the members of a group, in creation (or name) order.
std::vector<std::string> listGroup(hid_t group);
// Identifies the object at `path`: equal for two paths exactly when they reach the same object
// (hard links). Recursive walks keep a set of these, because a file may link a group into
// itself (h5py: f['a/b'] = f['/']) and a naive walk then never ends. Throws `code`.
std::string objectKey(hid_t loc, const std::string& path, ExitCode code);

// Shape and element type of a dataset.
struct DatasetInfo {
  std::vector<std::int64_t> dims;
  H5T_class_t typeClass = H5T_NO_CLASS;
  std::size_t typeSize = 0;
  bool isSigned = true;
  std::vector<std::int64_t> chunkDims;  // empty when contiguous
  bool gzip = false;
  bool fletcher32 = false;
  std::string typeName() const;  // "float32", "uint16", "string", ...
  std::int64_t rows() const { return dims.empty() ? 1 : dims[0]; }
};
DatasetInfo describe(hid_t dataset);

// The at::ScalarType a dataset's values naturally load as (float16 -> Half, uint16 -> Int,
// uint32 -> Long, ...). Throws `code` naming `what` for strings, compounds, and the like.
at::ScalarType naturalScalarType(const DatasetInfo& info, ExitCode code, const std::string& what);

// --- tensors -----------------------------------------------------------------

struct WriteOptions {
  bool fletcher32 = false;     // per-chunk checksums (implies chunking)
  int gzipLevel = 0;           // 0 = no compression
  std::int64_t chunkRows = 0;  // 0 = choose (~1 MiB chunks) when chunking is needed
};

// Writes `tensor` (any dtype but bf16 is stored as float32) as dataset `name` below `loc`.
void writeTensor(hid_t loc, const std::string& name, const at::Tensor& tensor,
                 const WriteOptions& options, ExitCode code);
// Reads the whole dataset as `as` (Undefined = its natural type).
at::Tensor readTensor(hid_t loc, const std::string& name, ExitCode code,
                      at::ScalarType as = at::ScalarType::Undefined);
// Reads rows [begin, end) along dimension 0 of an open dataset into a new CPU tensor of type
// `as`. `transfer` may be an MPI-IO collective transfer list.
at::Tensor readRows(hid_t dataset, std::int64_t begin, std::int64_t end, at::ScalarType as,
                    ExitCode code, const std::string& what, hid_t transfer = H5P_DEFAULT);
// Same, into `out` (a contiguous CPU tensor of the right shape: [end-begin, ...]). With
// axis = 1 the range is along dimension 1 instead (columns of a [2, E] edge list), and `out`
// is [dims[0], end-begin, ...].
void readRowsInto(hid_t dataset, std::int64_t begin, std::int64_t end, at::Tensor& out,
                  ExitCode code, const std::string& what, hid_t transfer = H5P_DEFAULT,
                  int axis = 0);

// --- attributes ------------------------------------------------------------------

void writeAttribute(hid_t object, const std::string& name, const std::string& value, ExitCode code);
void writeAttribute(hid_t object, const std::string& name, std::int64_t value, ExitCode code);
void writeAttribute(hid_t object, const std::string& name, double value, ExitCode code);
// 1-D numeric attributes (float64, int64).
void writeAttribute(hid_t object, const std::string& name, const std::vector<double>& values,
                    ExitCode code);
void writeAttribute(hid_t object, const std::string& name, const std::vector<std::int64_t>& values,
                    ExitCode code);
bool hasAttribute(hid_t object, const std::string& name);
std::string readStringAttribute(hid_t object, const std::string& name, ExitCode code);
std::int64_t readIntAttribute(hid_t object, const std::string& name, ExitCode code);
double readDoubleAttribute(hid_t object, const std::string& name, ExitCode code);
// A numeric attribute of one value or a 1-D array of at most `maxValues` (more is refused
// before anything is allocated), converted to T (double or std::int64_t).
template <class T>
std::vector<T> readArrayAttribute(hid_t object, const std::string& name, std::size_t maxValues,
                                  ExitCode code);

// The HDF5 memory type for a tensor dtype.
hid_t memoryType(at::ScalarType type);

// Name of an open object's file, for messages.
std::string fileNameOf(hid_t object);

}  // namespace mb::h5
