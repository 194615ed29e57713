// libFuzzer target: the data-file validator and loader (`megabatch data check` in a world of
// one) on structurally valid HDF5 files with fuzzed structure and contents.
//
// Why structured: libhdf5 1.10 itself crashes on some malformed bytes (a file-format parser
// bug, not ours). The input bytes are therefore read as choices: a config (layout, shards,
// splits, residency, streams, windows, context, dataset names) and, per dataset the layout
// reads, its object kind (dataset, missing, group, soft/external link), dtype (numeric, string,
// enum, compound, array, ...), shape (right, wrong rank, wrong rows, scalar, null), storage
// (contiguous, chunked, gzip, fletcher32, compact, unwritten) and values (a valid pattern, raw
// input bytes, or one injected NaN / Inf / negative / huge / decreasing value). The file is
// written with the HDF5 C API and loaded with ShardedData::load, then batches are gathered,
// and `megabatch inspect` describes it.
// Byte 0 of every choice is the valid one, so an all-zero input describes a loadable file.
//
// Properties checked: the only exceptions are mb::Errors of exit code 3 (bad data) or 2 (a
// config that does not fit the file) with a message; a load that succeeds gives splits inside [0,
// N) in time order, a train split of at least V samples, and batches of the announced sizes.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <hdf5.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Log.h"
#include "config/ConfigValidator.h"
#include "data/ShardedData.h"
#include "data/tools/Tools.h"
#include "dist/SingleCommunicator.h"
#include "tests/fuzz/Choices.h"

namespace {

using mb::fuzz::Choices;
using mb::h5::Handle;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "data schema fuzzer: %s\n", what.c_str());
  H5Eprint2(H5E_DEFAULT, stderr);
  std::abort();
}

// --- element types ----------------------------------------------------------------

enum class Elem {
  kDefault,  // the role's natural type (float32 values, int64 indices)
  kF64,
  kF16,
  kI8,
  kU8,
  kI16,
  kU16,
  kI32,
  kU32,
  kU64,
  kF32,
  kI64,
  kFixedString,
  kVlenString,
  kBoolEnum,
  kCompound,
  kArray,
  kOpaque,
  kBitfield,
  kCount
};

Handle halfType() {
  Handle t(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  H5Tset_fields(t.get(), 15, 10, 5, 0, 10);
  H5Tset_size(t.get(), 2);
  H5Tset_ebias(t.get(), 15);
  return t;
}

Handle makeType(Elem e) {
  auto copy = [](hid_t base) { return Handle(H5Tcopy(base), H5Tclose); };
  switch (e) {
    case Elem::kF64:
      return copy(H5T_NATIVE_DOUBLE);
    case Elem::kF16:
      return halfType();
    case Elem::kI8:
      return copy(H5T_NATIVE_INT8);
    case Elem::kU8:
      return copy(H5T_NATIVE_UINT8);
    case Elem::kI16:
      return copy(H5T_NATIVE_INT16);
    case Elem::kU16:
      return copy(H5T_NATIVE_UINT16);
    case Elem::kI32:
      return copy(H5T_NATIVE_INT32);
    case Elem::kU32:
      return copy(H5T_NATIVE_UINT32);
    case Elem::kU64:
      return copy(H5T_NATIVE_UINT64);
    case Elem::kI64:
      return copy(H5T_NATIVE_INT64);
    case Elem::kFixedString: {
      Handle t = copy(H5T_C_S1);
      H5Tset_size(t.get(), 4);
      return t;
    }
    case Elem::kVlenString: {
      Handle t = copy(H5T_C_S1);
      H5Tset_size(t.get(), H5T_VARIABLE);
      return t;
    }
    case Elem::kBoolEnum: {  // what h5py writes for numpy bool
      Handle t(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose);
      std::int8_t no = 0, yes = 1;
      H5Tenum_insert(t.get(), "FALSE", &no);
      H5Tenum_insert(t.get(), "TRUE", &yes);
      return t;
    }
    case Elem::kCompound: {
      Handle t(H5Tcreate(H5T_COMPOUND, 8), H5Tclose);
      H5Tinsert(t.get(), "a", 0, H5T_NATIVE_FLOAT);
      H5Tinsert(t.get(), "b", 4, H5T_NATIVE_INT32);
      return t;
    }
    case Elem::kArray: {
      hsize_t two = 2;
      return Handle(H5Tarray_create2(H5T_NATIVE_FLOAT, 1, &two), H5Tclose);
    }
    case Elem::kOpaque:
      return Handle(H5Tcreate(H5T_OPAQUE, 4), H5Tclose);
    case Elem::kBitfield:
      return copy(H5T_NATIVE_B8);
    default:
      return copy(H5T_NATIVE_FLOAT);
  }
}

bool isNumeric(Elem e) {
  return e <= Elem::kI64;
}

// --- datasets -----------------------------------------------------------------------

// What a dataset should hold when its choices are all zero.
struct Spec {
  std::string path;                           // inside the file
  std::vector<hsize_t> dims;                  // the right shape
  Elem natural = Elem::kF32;                  // the right dtype
  std::function<double(std::int64_t)> value;  // the right value of element i
};

enum class Corruption { kNaN, kInf, kNegative, kHuge, kDecrease, kInt64Max, kCount };

std::vector<double> values(Choices& in, const Spec& spec, std::size_t count) {
  std::vector<double> v(count);
  for (std::size_t i = 0; i < count; ++i)
    v[i] = spec.value(static_cast<std::int64_t>(i));
  if (count == 0 || !in.flag()) return v;
  std::size_t at = static_cast<std::size_t>(in.next()) % count;
  switch (static_cast<Corruption>(in.pick(static_cast<int>(Corruption::kCount)))) {
    case Corruption::kNaN:
      v[at] = std::nan("");
      break;
    case Corruption::kInf:
      v[at] = -INFINITY;
      break;
    case Corruption::kNegative:
      v[at] = -1 - v[at];
      break;
    case Corruption::kHuge:
      v[at] = 1e30;
      break;
    case Corruption::kDecrease:
      v[at] = at > 0 ? v[at - 1] - 1 : v[at] + 1e6;
      break;
    default:
      v[at] = 9.2e18;
      break;
  }
  return v;
}

std::vector<hsize_t> shapeOf(Choices& in, const Spec& spec) {
  std::vector<hsize_t> dims = spec.dims;
  switch (in.pick(8)) {
    case 1:
      dims.push_back(1 + in.pick(3));
      break;  // one rank too many
    case 2:
      if (!dims.empty()) dims.pop_back();
      break;  // one rank too few
    case 3:
      if (!dims.empty()) dims[0] = in.next();
      break;  // other rows
    case 4:
      dims.clear();
      break;  // scalar
    case 5:
      if (dims.size() > 1) dims.back() = in.pick(3);
      break;  // other width
    default:
      break;
  }
  return dims;
}

Handle makeSpace(Choices& in, const std::vector<hsize_t>& dims) {
  if (dims.empty()) return Handle(H5Screate(in.pick(4) == 0 ? H5S_NULL : H5S_SCALAR), H5Sclose);
  return Handle(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
}

// Storage: 0 contiguous, 1 chunked, 2 chunked + shuffle + gzip, 3 chunked + fletcher32,
// 4 compact (small data only), 5 contiguous but never written (reads the fill value).
Handle makeCreateList(Choices& in, const std::vector<hsize_t>& dims, std::size_t bytes,
                      bool& write) {
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  int storage = in.pick(6);
  write = storage != 5;
  if (dims.empty()) return dcpl;
  if (storage >= 1 && storage <= 3) {
    std::vector<hsize_t> chunk(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i)
      chunk[i] = std::max<hsize_t>(1, dims[i]);
    chunk[0] = std::min<hsize_t>(chunk[0], 1 + in.pick(16));
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (storage == 2) {
      H5Pset_shuffle(dcpl.get());
      H5Pset_deflate(dcpl.get(), 1);
    }
    if (storage == 3) H5Pset_fletcher32(dcpl.get());
  } else if (storage == 4 && bytes < 32768) {
    H5Pset_layout(dcpl.get(), H5D_COMPACT);
  }
  return dcpl;
}

void writeValues(Choices& in, hid_t dataset, Elem elem, hid_t type, const Spec& spec,
                 std::size_t count) {
  if (count == 0) return;
  if (elem == Elem::kVlenString) {
    std::vector<const char*> text(count, "x");
    H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
  } else if (isNumeric(elem) && !(in.pick(4) == 3)) {
    // HDF5 converts (and clamps) the doubles to the file's type, as h5py would.
    std::vector<double> v = values(in, spec, count);
    H5Dwrite(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  } else {
    std::vector<std::uint8_t> raw = in.bytes(count * H5Tget_size(type));
    H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data());
  }
  H5Eclear2(H5E_DEFAULT);
}

void createParents(hid_t file, const std::string& path) {
  for (std::size_t slash = path.find('/'); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    std::string parent = path.substr(0, slash);
    if (parent.empty() || H5Lexists(file, parent.c_str(), H5P_DEFAULT) > 0) continue;
    Handle group(H5Gcreate2(file, parent.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  }
  H5Eclear2(H5E_DEFAULT);
}

void writeDataset(Choices& in, hid_t file, const Spec& spec) {
  Elem elem = static_cast<Elem>(in.pick(static_cast<int>(Elem::kCount)));
  if (elem == Elem::kDefault) elem = spec.natural;
  Handle type = makeType(elem);
  std::vector<hsize_t> dims = shapeOf(in, spec);
  Handle space = makeSpace(in, dims);
  std::size_t count = 1;
  for (hsize_t d : dims)
    count *= d;
  if (H5Sget_simple_extent_type(space.get()) == H5S_NULL) count = 0;
  bool write = true;
  Handle dcpl = makeCreateList(in, dims, count * H5Tget_size(type.get()), write);
  Handle dataset(H5Dcreate2(file, spec.path.c_str(), type.get(), space.get(), H5P_DEFAULT,
                            dcpl.get(), H5P_DEFAULT),
                 H5Dclose);
  if (!dataset.valid()) {  // some filters refuse some types (e.g. variable-length strings)
    H5Eclear2(H5E_DEFAULT);
    dataset = Handle(H5Dcreate2(file, spec.path.c_str(), type.get(), space.get(), H5P_DEFAULT,
                                H5P_DEFAULT, H5P_DEFAULT),
                     H5Dclose);
  }
  if (!dataset.valid()) fail("could not create " + spec.path);
  if (write) writeValues(in, dataset.get(), elem, type.get(), spec, count);
}

// Object kind: 0 the dataset; 1 missing; 2 a group; 3 a dangling soft link; 4 a soft link to
// itself; 5 an external link to a missing file; 6 a hard link to `other` (another dataset);
// 7 a hard link to the root group (a cycle, as h5py's f['a/b'] = f['/'] makes).
void writeObject(Choices& in, hid_t file, const Spec& spec, const std::string& other) {
  createParents(file, spec.path);
  const char* path = spec.path.c_str();
  int kind = in.pick(16);  // rare: most inputs keep every dataset
  switch (kind) {
    case 1:
      break;
    case 2:
      Handle(H5Gcreate2(file, path, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      break;
    case 3:
      H5Lcreate_soft("/nowhere", file, path, H5P_DEFAULT, H5P_DEFAULT);
      break;
    case 4:
      H5Lcreate_soft(("/" + spec.path).c_str(), file, path, H5P_DEFAULT, H5P_DEFAULT);
      break;
    case 5:
      H5Lcreate_external("missing.h5", "/x", file, path, H5P_DEFAULT, H5P_DEFAULT);
      break;
    case 6:
      if (!other.empty() && H5Lexists(file, other.c_str(), H5P_DEFAULT) > 0) {
        H5Lcreate_hard(file, other.c_str(), file, path, H5P_DEFAULT, H5P_DEFAULT);
        break;
      }
      [[fallthrough]];
    case 7:
      H5Lcreate_hard(file, "/", file, path, H5P_DEFAULT, H5P_DEFAULT);
      break;
    default:
      writeDataset(in, file, spec);
      break;
  }
  H5Eclear2(H5E_DEFAULT);
}

// vocab_size: 0 int64 on the dataset; 1 on the file; 2 missing; 3 float64; 4 a string;
// 5 an int64 array of two; 6 a null dataspace; 7 an int32 from the input (maybe negative).
void writeVocabAttribute(Choices& in, hid_t file, const std::string& tokens, std::int64_t vocab) {
  int mode = in.pick(8);
  if (mode == 2) return;
  Handle object(
      mode == 1 ? H5Oopen(file, "/", H5P_DEFAULT) : H5Oopen(file, tokens.c_str(), H5P_DEFAULT),
      H5Oclose);
  H5Eclear2(H5E_DEFAULT);
  if (!object.valid()) return;
  hsize_t two = 2;
  Handle space(mode == 5   ? H5Screate_simple(1, &two, nullptr)
               : mode == 6 ? H5Screate(H5S_NULL)
                           : H5Screate(H5S_SCALAR),
               H5Sclose);
  Handle type = makeType(mode == 3   ? Elem::kF64
                         : mode == 4 ? Elem::kFixedString
                         : mode == 7 ? Elem::kI32
                                     : Elem::kI64);
  Handle attribute(
      H5Acreate2(object.get(), "vocab_size", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
      H5Aclose);
  std::int64_t pair[2] = {vocab, vocab};
  double real = static_cast<double>(vocab) + (in.flag() ? 0.5 : 0.0);
  std::uint32_t bits = std::uint32_t{in.next()} << 24 | std::uint32_t{in.next()} << 8 | in.next();
  auto raw = static_cast<std::int32_t>(bits);
  if (mode == 3)
    H5Awrite(attribute.get(), H5T_NATIVE_DOUBLE, &real);
  else if (mode == 4)
    H5Awrite(attribute.get(), type.get(), "256");
  else if (mode == 7)
    H5Awrite(attribute.get(), H5T_NATIVE_INT32, &raw);
  else if (mode != 6)
    H5Awrite(attribute.get(), H5T_NATIVE_INT64, pair);
  H5Eclear2(H5E_DEFAULT);
}

// --- config and file ------------------------------------------------------------------

mb::Config makeConfig(Choices& in, const std::string& path) {
  mb::Config c;
  c.run.dir = "unused";
  c.data.path = path;
  static const char* const kLayouts[] = {"samples", "series", "tokens"};
  c.data.layout = kLayouts[in.pick(3)];
  c.model.kind = c.data.layout == "tokens" ? "gpt" : "lstm";
  c.data.canonicalShards = in.range(1, 8);
  static const double kSplits[][3] = {
      {0.8, 0.1, 0.1}, {1.0, 0, 0}, {0.5, 0.25, 0.25}, {0.34, 0.33, 0.33}};
  const double* split = kSplits[in.pick(4)];
  c.data.split.trainFraction = split[0];
  c.data.split.valFraction = split[1];
  c.data.split.testFraction = split[2];
  c.data.split.embargo = std::vector<std::int64_t>{-1, 0, 3}[in.pick(3)];
  int residency = in.pick(3);
  c.data.residency = residency == 2 ? mb::Residency::kStream : mb::Residency::kHost;
  c.data.hostMmap = residency == 0;
  c.data.streamChunkItems = in.range(1, 16);
  c.data.residentDtype = in.flag() ? mb::DType::kBf16 : mb::DType::kFp32;
  c.data.shuffle = !in.flag();
  c.train.globalBatch = in.range(1, 32);
  if (c.data.layout != "tokens" && in.flag()) {
    c.model.task = mb::Task::kClassification;
    c.model.numClasses = in.pick(5);
  }
  c.data.context = in.range(1, 16);
  int streams = static_cast<int>(in.range(1, 3));
  for (int s = 0; s < streams; ++s)
    c.data.streams.push_back({"m" + std::to_string(s), in.range(1, 12)});
  if (in.pick(4) == 1) {  // datasets in a group, named with a leading slash
    c.data.names.features = "/in/x";
    c.data.names.targets = "in/y/";
    c.data.names.timestamps = "in/t";
    c.data.names.tokens = "/in/tok";
    c.data.names.series = "in/s";
    c.data.names.sampleEnds = "in/ends";
  }
  return c;
}

std::string strip(std::string path) {
  while (!path.empty() && path.front() == '/')
    path.erase(path.begin());
  while (!path.empty() && path.back() == '/')
    path.pop_back();
  return path;
}

void writeTargets(Choices& in, hid_t file, const mb::Config& c, hsize_t n,
                  const std::string& other) {
  bool labels = c.model.task == mb::Task::kClassification;
  Spec targets{
      strip(c.data.names.targets), {n}, labels ? Elem::kI64 : Elem::kF32, [labels](std::int64_t i) {
        return labels ? i % 3 : 0.5 * i;
      }};
  if (!labels && in.flag()) targets.dims.push_back(1 + in.pick(3));
  writeObject(in, file, targets, other);
  Spec timestamps{strip(c.data.names.timestamps), {n}, Elem::kI64, [](std::int64_t i) {
                    return 1000.0 + 60.0 * i;
                  }};
  if (in.pick(3) != 2) writeObject(in, file, timestamps, targets.path);
}

void writeSamples(Choices& in, hid_t file, const mb::Config& c) {
  hsize_t n = in.size(64);
  hsize_t window = in.pick(6), features = in.range(1, 4);
  Spec spec{strip(c.data.names.features), {n, features}, Elem::kF32, [](std::int64_t i) {
              return 0.25 * i;
            }};
  if (window > 0) spec.dims = {n, window, features};
  writeObject(in, file, spec, "");
  writeTargets(in, file, c, n, spec.path);
}

void writeSeries(Choices& in, hid_t file, const mb::Config& c) {
  hsize_t n = in.size(64);
  std::string firstEnds;
  for (const auto& stream : c.data.streams) {
    hsize_t rows = in.size(128), features = in.range(1, 3);
    Spec values{strip(c.data.names.series) + "/" + stream.name + "/values",
                {rows, features},
                Elem::kF32,
                [](std::int64_t i) { return 0.125 * i; }};
    writeObject(in, file, values, "");
    // Sample i ends at row (i + 1) * rows / n - 1: non-decreasing, inside the stream.
    Spec ends{strip(c.data.names.sampleEnds) + "/" + stream.name,
              {n},
              Elem::kI64,
              [rows, n](std::int64_t i) {
                return std::max<double>(0, (i + 1) * static_cast<double>(rows) / n - 1);
              }};
    if (in.pick(4) == 1) ends.dims[0] = in.next();  // this stream disagrees on N
    writeObject(in, file, ends, firstEnds);
    if (firstEnds.empty()) firstEnds = ends.path;
  }
  writeTargets(in, file, c, n, firstEnds);
}

void writeTokens(Choices& in, hid_t file, const mb::Config& c) {
  hsize_t length = in.size(64) * (1 + in.pick(4));
  std::int64_t vocab = in.range(2, 255);
  Spec tokens{strip(c.data.names.tokens), {length}, Elem::kU16, [vocab](std::int64_t i) {
                return static_cast<double>((i * 7) % vocab);
              }};
  writeObject(in, file, tokens, "");
  writeVocabAttribute(in, file, tokens.path, vocab);
}

void writeFile(Choices& in, const std::string& path, const mb::Config& c) {
  Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) fail("cannot create " + path);
  if (c.data.layout == "samples") {
    writeSamples(in, file.get(), c);
  } else if (c.data.layout == "series") {
    writeSeries(in, file.get(), c);
  } else {
    writeTokens(in, file.get(), c);
  }
}

// --- the properties of a successful load ---------------------------------------------------

void checkLoaded(mb::data::ShardedData& data, const mb::Config& c) {
  const auto& info = data.info();
  std::int64_t previous = 0;
  for (const auto& range : info.splits) {
    if (range.size() < 0 || range.begin < previous || range.end > info.numSamples)
      fail("splits out of order or outside [0, N)");
    if (range.size() > 0) previous = range.end;
  }
  if (info.split(mb::data::Split::kTrain).size() < c.data.canonicalShards)
    fail("a train split smaller than data.canonical_shards was accepted");
  data.beginEpoch(0);
  for (std::int64_t b : {std::int64_t{0}, data.batchesPerEpoch() - 1}) {
    if (b < 0) continue;
    std::int64_t count = data.localCount(b);
    if (data.trainBatch(b, 0, count, at::kFloat).size() != count) fail("train batch size");
  }
  for (auto split : {mb::data::Split::kVal, mb::data::Split::kTest}) {
    std::int64_t count = std::min<std::int64_t>(data.evalCount(split), 64);
    if (count > 0 && data.evalBatch(split, 0, count, at::kFloat).size() != count)
      fail("eval batch size");
  }
}

// Runs `body`; bad input may only end it with exit code 3 (a bad file) or 2 (a config that
// does not fit the file). h5 helpers build errors with makeError, so the category is in
// code(), not in the class.
template <class Body>
void expectBadInputOrSuccess(Body body) {
  try {
    body();
  } catch (const mb::Error& e) {
    if (e.code() != mb::ExitCode::kData && e.code() != mb::ExitCode::kUsage)
      fail(std::string("exit code ") + mb::exitCodeName(e.code()) +
           " for bad input: " + e.message());
    if (e.message().empty()) fail("an error without a message");
  }
}

std::string scratchFile() {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp ? tmp : "/tmp") + "/megabatch-fuzz-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) fail("mkdtemp failed for " + dir);
  return dir + "/data.h5";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = [] {
    mb::log::setLevel("off");
    at::set_num_threads(1);  // deterministic and cheap: one input at a time
    return scratchFile();
  }();
  Choices in(data, size);
  mb::Config config = makeConfig(in, path);
  if (!mb::validateConfig(config).empty()) return 0;  // the config fuzzer's domain
  writeFile(in, path, config);
  expectBadInputOrSuccess([&] {
    mb::dist::SingleCommunicator comm;
    auto loaded = mb::data::ShardedData::load(config, comm, c10::Device(c10::kCPU));
    checkLoaded(*loaded, config);
  });
  // `megabatch inspect FILE` reads every dataset and attribute, whatever the layout.
  expectBadInputOrSuccess([&] {
    std::lock_guard<std::recursive_mutex> lock(mb::h5::libraryMutex());
    if (mb::data::describeDataFile(path).empty()) fail("inspect printed nothing");
  });
  return 0;
}
