// libFuzzer target: the checkpoint reader (train::readCheckpointFile, with and without the
// model's shapes, and `megabatch inspect`'s describeCheckpoint) on checkpoints a hostile person
// edited (Note [Checkpoints are untrusted input], train/checkpoints/CheckpointVerify.h).
//
// Why structured: libhdf5 1.10 itself crashes on some malformed bytes (a file-format parser
// bug, not ours), so the input is read as choices (tests/fuzz/Choices.h), as in the data-schema
// fuzzer. A real checkpoint is written once with train::writeCheckpointFile (its manifest
// included); each input copies it and applies up to 6 edits with the HDF5 C API: a tensor
// replaced by a dataset of another dtype (float, int, string, compound), rank, shape (up to
// 2^63 - 1 and beyond a chunk's limits), storage (chunked with and without Fletcher-32, deflate,
// contiguous, compact, external storage, virtual), fill value and contents; a tensor replaced by
// an external link, a soft link (out of its group, dangling, to itself) or deleted; a group
// linked into itself; unexpected tensors, named datatypes, groups replaced by links; the
// manifest deleted, emptied or rewritten; trainer attributes deleted or retyped; then /meta's
// config or data description rewritten to describe a huge model, another one, or none.
// Every outside reference names a FIFO, so a reader that opened one would block until
// libFuzzer's -timeout reports it.
// Byte 0 of every choice is the valid one, so an all-zero input is the checkpoint as written.
//
// Properties checked: the only exceptions are mb::Errors of exit code 4 with a message; a read
// that succeeds holds tensors of no more bytes than the file, and, given the model's shapes, the
// model's shapes; every tensor was verified by Fletcher-32 (describeCheckpoint says so); the
// check of the config against the tensors (inspect, resume) builds no model past the file's
// memory bound.
// Run with -malloc_limit_mb=512: a declared shape that were allocated would end the run.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <hdf5.h>

#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Log.h"
#include "config/ConfigLoader.h"
#include "data/DataInfo.h"
#include "model/Model.h"
#include "model/StateDict.h"
#include "tests/fuzz/Choices.h"
#include "train/CheckpointModel.h"
#include "train/checkpoints/Checkpoint.h"
#include "train/checkpoints/CheckpointVerify.h"

namespace {

using mb::fuzz::Choices;
using mb::h5::Handle;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "checkpoint fuzzer: %s\n", what.c_str());
  std::abort();
}

struct Scratch {
  std::string dir, base, file, fifoRaw, fifoH5;
  std::string image;  // the base checkpoint's bytes
};

const char* kTensors[] = {"model/body.0.weight", "model/body.0.bias",
                          "optimizer/body.0.weight/exp_avg", "optimizer/body.0.bias/exp_avg"};
const std::vector<hsize_t> kShapes[] = {{4, 3}, {4}, {4, 3}, {4}};

// The base checkpoint's model: a real MLP that megabatch builds from this config and data
// description, so that the check of its config against its tensors (Note [A checkpoint's config
// describes its tensors]) passes on the file as written.
const char* kConfig = "model: {kind: mlp, hidden: 4, layers: 1}\n";
const char* kDataInfo =
    "layout: samples\ninputs: [{name: x, window: 1, features: 3}]\ntarget_shape: []\n"
    "integer_targets: false\nnum_classes: 0\nvocab_size: 0\nhas_timestamps: false\n";
// What edit 10 writes as /meta's config or data description instead.
const char* kHostileConfigs[] = {
    "model: {kind: mlp, hidden: 40000, layers: 2}\n",  // 6.4 GB: refused within the file's bound
    "model: {kind: mlp, hidden: 1073741824, layers: 1}\n",
    "model: {kind: mlp, hidden: 2, layers: 1}\n",  // builds; other shapes
    "model: {kind: mlp, hidden: 4, layers: 3}\n",  // builds; more tensors
    "model: {kind: lstm, hidden: 4}\n",
    "model: {kind: mlp, hidden: -4}\n",
    "model: [\n",
    "",
};
const char* kHostileDataInfos[] = {
    "layout: samples\ninputs: [{name: x, window: 1, features: 4294967296}]\ntarget_shape: []\n"
    "integer_targets: false\nnum_classes: 0\nvocab_size: 0\nhas_timestamps: false\n",
    "layout: samples\ninputs: 7\n",
    "layout: tokens\ninputs: []\ntarget_shape: [8]\ninteger_targets: true\nnum_classes: 0\n"
    "vocab_size: 1099511627776\nhas_timestamps: false\n",
};

Scratch setUp() {
  Scratch s;
  const char* tmp = std::getenv("TMPDIR");
  s.dir = std::string(tmp ? tmp : "/tmp") + "/megabatch-ckfuzz-XXXXXX";
  if (mkdtemp(s.dir.data()) == nullptr) fail("mkdtemp failed for " + s.dir);
  s.base = s.dir + "/base.h5";
  s.file = s.dir + "/step-00000010.h5";
  // Outside references: FIFOs, so following one blocks.
  s.fifoRaw = s.dir + "/outside.raw";
  s.fifoH5 = s.dir + "/outside.h5";
  if (mkfifo(s.fifoRaw.c_str(), 0600) != 0 || mkfifo(s.fifoH5.c_str(), 0600) != 0)
    fail("mkfifo failed in " + s.dir);
  mb::train::CheckpointContent c;
  c.configYaml = kConfig;
  c.dataInfoYaml = kDataInfo;
  c.optimizerKind = "adamw";
  c.trainer.step = 10;
  const mb::Config config = mb::parseConfig(kConfig, "the fuzzer's config", {});
  auto model = mb::model::buildModel(config.model, mb::data::modelSpecFromYaml(kDataInfo), 1);
  c.model = mb::model::stateDict(*model);
  for (const auto& [name, tensor] : c.model)
    c.optimizer.emplace_back(name + "/exp_avg", at::zeros_like(tensor));
  for (int i = 0; i < 2; ++i) {
    const std::vector<std::int64_t> shape(kShapes[i].begin(), kShapes[i].end());
    if (c.model[i].first != std::string(kTensors[i]).substr(6) ||
        c.model[i].second.sizes() != shape)
      fail("the MLP's tensors are not the ones the edits name (" + c.model[i].first + ")");
  }
  mb::train::writeCheckpointFile(s.base, c);
  std::ifstream in(s.base, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  s.image = bytes.str();
  return s;
}

// --- edits -------------------------------------------------------------------------

hsize_t dimChoice(Choices& in, hsize_t natural) {
  static const hsize_t kDims[] = {0,
                                  1,
                                  17,
                                  hsize_t{1} << 31,
                                  hsize_t{1} << 34,
                                  hsize_t{1} << 62,
                                  (hsize_t{1} << 63) - 1,
                                  hsize_t{1} << 63,
                                  ~hsize_t{0} - 1};
  int pick = in.pick(10);
  return pick == 0 ? natural : kDims[pick - 1];
}

hsize_t chunkChoice(Choices& in, hsize_t dim) {
  static const hsize_t kChunks[] = {1, 2, hsize_t{1} << 20, (hsize_t{1} << 32) - 1,
                                    (hsize_t{1} << 62)};
  int pick = in.pick(6);
  return pick == 0 ? std::max<hsize_t>(1, std::min<hsize_t>(dim, 1 << 16)) : kChunks[pick - 1];
}

Handle typeChoice(Choices& in) {
  switch (in.pick(6)) {
    case 1:
      return Handle(H5Tcopy(H5T_NATIVE_DOUBLE), H5Tclose);
    case 2:
      return Handle(H5Tcopy(H5T_NATIVE_INT64), H5Tclose);
    case 3:
      return Handle(H5Tcopy(H5T_NATIVE_INT8), H5Tclose);
    case 4: {
      Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(t.get(), 4);
      return t;
    }
    case 5: {
      Handle t(H5Tcreate(H5T_COMPOUND, 8), H5Tclose);
      H5Tinsert(t.get(), "a", 0, H5T_NATIVE_FLOAT);
      H5Tinsert(t.get(), "b", 4, H5T_NATIVE_INT32);
      return t;
    }
    default:
      return Handle(H5Tcopy(H5T_NATIVE_FLOAT), H5Tclose);
  }
}

// True when `path` leads through hard links only (its parents, and with `itself` its own link):
// the harness must never follow the external links it made. HDF5 would open the FIFO they name,
// and libhdf5 1.10 leaks a metadata block when that open fails, which LeakSanitizer then reports
// against this fuzzer (found by sanitize.fuzz). The reader under test never follows a link.
bool staysInFile(hid_t file, const std::string& path, bool itself) {
  for (std::size_t slash = path.find('/');; slash = path.find('/', slash + 1)) {
    if (slash == std::string::npos && !itself) return true;
    const std::string prefix = path.substr(0, slash);
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return true;  // not there: made afresh, as a hard link
    }
    H5L_info_t info;
    if (H5Lget_info(file, prefix.c_str(), &info, H5P_DEFAULT) < 0 || info.type != H5L_TYPE_HARD) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos) return true;
  }
}

void replaceWithDataset(Choices& in, hid_t file, const Scratch& s, int which) {
  const std::string path = kTensors[which];
  Handle type = typeChoice(in);
  int rankPick = in.pick(5);
  std::vector<hsize_t> dims =
      rankPick == 0 ? kShapes[which] : std::vector<hsize_t>(rankPick - 1, hsize_t{4});
  for (std::size_t i = 0; i < dims.size(); ++i)
    dims[i] = dimChoice(in, i < kShapes[which].size() ? kShapes[which][i] : 4);
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  if (!space.valid()) return;
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  int storage = in.pick(7);
  if (!dims.empty() && (storage == 0 || storage == 1 || storage == 6)) {
    std::vector<hsize_t> chunk(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i)
      chunk[i] = chunkChoice(in, dims[i]);
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (storage == 6) H5Pset_deflate(dcpl.get(), 1);
    if (storage != 1) H5Pset_fletcher32(dcpl.get());
  } else if (storage == 3) {
    H5Pset_layout(dcpl.get(), H5D_COMPACT);
  } else if (storage == 4) {
    H5Pset_external(dcpl.get(), s.fifoRaw.c_str(), 0, in.flag() ? H5F_UNLIMITED : 48);
  } else if (storage == 5 && !dims.empty()) {
    Handle source(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
    H5Pset_virtual(dcpl.get(), space.get(), s.fifoH5.c_str(), "/x", source.get());
  }
  if (in.flag()) {
    float fill = 0.5f;
    H5Pset_fill_value(dcpl.get(), H5T_NATIVE_FLOAT, &fill);
  }
  H5Ldelete(file, path.c_str(), H5P_DEFAULT);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle dataset(
      H5Dcreate2(file, path.c_str(), type.get(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
      H5Dclose);
  if (!dataset.valid() || storage == 4 || storage == 5) return;  // never write outside
  // Only small datasets get values. The count is taken dimension by dimension: HDF5's npoints
  // wraps for dimensions near 2^64, and writing such a dataset made HDF5 map every one of its
  // chunks (past 4 GiB of RSS in the harness, not the reader: found by sanitize.fuzz).
  std::uint64_t points = 1;
  for (hsize_t d : dims) {
    if (d > 4096 || (points *= d) > 4096) return;
  }
  std::size_t size = H5Tget_size(type.get());
  if (points == 0 || H5Tget_class(type.get()) == H5T_STRING || !in.flag()) return;
  std::vector<std::uint8_t> values = in.bytes(static_cast<std::size_t>(points) * size);
  H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
}

void edit(Choices& in, hid_t file, const Scratch& s) {
  int which = in.pick(4);
  const std::string path = kTensors[which];
  const int kind = in.pick(10);
  const bool local = staysInFile(file, path, false) && staysInFile(file, "model/x", false) &&
                     staysInFile(file, "extra/x", false) && staysInFile(file, "meta", true) &&
                     staysInFile(file, "trainer", true) &&
                     staysInFile(file, "optimizer/body.0.bias", true);
  if (!local && kind != 7) return;  // a later edit through an outside link: nothing to edit
  switch (kind) {
    case 0:
      replaceWithDataset(in, file, s, which);
      break;
    case 1:
      H5Ldelete(file, path.c_str(), H5P_DEFAULT);
      H5Lcreate_external(s.fifoH5.c_str(), "/x", file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT);
      break;
    case 2: {
      static const char* kTargets[] = {"/meta", "/model", "/model/body.0.bias", "/nowhere",
                                       "/optimizer/body.0.bias/exp_avg"};
      H5Ldelete(file, path.c_str(), H5P_DEFAULT);
      H5Lcreate_soft(kTargets[in.pick(5)], file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT);
      break;
    }
    case 3: {
      static const char* kGroups[] = {"/model", "/optimizer", "/", "/optimizer/body.0.bias"};
      H5Lcreate_hard(file, kGroups[in.pick(4)], file, "/model/loop", H5P_DEFAULT, H5P_DEFAULT);
      break;
    }
    case 4:
      H5Ldelete(file, path.c_str(), H5P_DEFAULT);
      break;
    case 5: {
      hsize_t four = 4;
      Handle space(H5Screate_simple(1, &four, nullptr), H5Sclose);
      Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      H5Pset_chunk(dcpl.get(), 1, &four);
      H5Pset_fletcher32(dcpl.get());
      Handle d(H5Dcreate2(file, in.flag() ? "model/stray" : "extra/stray", H5T_NATIVE_FLOAT,
                          space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
               H5Dclose);
      float values[4] = {1, 2, 3, 4};
      if (d.valid()) H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
      break;
    }
    case 6: {
      Handle meta(H5Gopen2(file, "meta", H5P_DEFAULT), H5Gclose);
      if (!meta.valid()) break;
      int how = in.pick(4);
      if (how == 0) {
        H5Adelete(meta.get(), "manifest");
      } else {
        std::vector<std::uint8_t> raw = in.bytes(how == 1 ? 0 : 24);
        std::string text(raw.begin(), raw.end());
        if (how == 3) text = "model/body.0.bias\tfloat32\t[17179869184]\t68719476736\n";
        mb::h5::writeAttribute(meta.get(), "manifest", text, mb::ExitCode::kCheckpoint);
      }
      break;
    }
    case 7: {
      static const char* kRoots[] = {"model", "optimizer", "extra", "meta", "trainer"};
      const char* root = kRoots[in.pick(5)];
      H5Ldelete(file, root, H5P_DEFAULT);
      if (in.flag())
        H5Lcreate_external(s.fifoH5.c_str(), "/", file, root, H5P_DEFAULT, H5P_DEFAULT);
      else
        H5Lcreate_soft("/model", file, root, H5P_DEFAULT, H5P_DEFAULT);
      break;
    }
    case 8: {
      Handle type(H5Tcopy(H5T_NATIVE_FLOAT), H5Tclose);
      H5Tcommit2(file, "model/type", type.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      break;
    }
    case 9: {
      Handle trainer(H5Gopen2(file, "trainer", H5P_DEFAULT), H5Gclose);
      if (!trainer.valid()) break;
      H5Adelete(trainer.get(), "step");
      if (in.flag())
        mb::h5::writeAttribute(trainer.get(), "step", std::string("ten"),
                               mb::ExitCode::kCheckpoint);
      break;
    }
  }
  H5Eclear2(H5E_DEFAULT);
}

// After the edits, so that the committed seeds keep their meaning (their trailing zeros read as
// "as written"): /meta's config or data description may describe a huge model, another one, or
// none megabatch can build (issue 36 item 5).
void rewriteMeta(Choices& in, hid_t file) {
  constexpr int kConfigs = sizeof(kHostileConfigs) / sizeof(kHostileConfigs[0]);
  constexpr int kDataInfos = sizeof(kHostileDataInfos) / sizeof(kHostileDataInfos[0]);
  const int pick = in.pick(1 + kConfigs + kDataInfos);
  if (pick == 0 || !staysInFile(file, "meta", true)) return;
  Handle meta(H5Gopen2(file, "meta", H5P_DEFAULT), H5Gclose);
  if (!meta.valid()) return;
  if (pick <= kConfigs)
    mb::h5::writeAttribute(meta.get(), "config", std::string(kHostileConfigs[pick - 1]),
                           mb::ExitCode::kCheckpoint);
  else
    mb::h5::writeAttribute(meta.get(), "data_info",
                           std::string(kHostileDataInfos[pick - 1 - kConfigs]),
                           mb::ExitCode::kCheckpoint);
  H5Eclear2(H5E_DEFAULT);
}

void writeInput(Choices& in, const Scratch& s) {
  {
    std::ofstream out(s.file, std::ios::binary | std::ios::trunc);
    out.write(s.image.data(), static_cast<std::streamsize>(s.image.size()));
  }
  Handle file(H5Fopen(s.file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) fail("cannot reopen the base checkpoint");
  int edits = in.range(0, 6);
  for (int i = 0; i < edits; ++i)
    edit(in, file.get(), s);
  rewriteMeta(in, file.get());
}

// --- properties ----------------------------------------------------------------------

template <class Body>
void expectCheckpointErrorOrSuccess(Body body) {
  try {
    body();
  } catch (const mb::Error& e) {
    if (e.code() != mb::ExitCode::kCheckpoint)
      fail(std::string("exit code ") + mb::exitCodeName(e.code()) +
           " for a hostile checkpoint: " + e.message());
    if (e.message().empty()) fail("an error without a message");
  }
}

void checkRead(const mb::train::CheckpointContent& c, const std::string& path,
               const mb::train::ExpectedTensors* expected) {
  struct stat info {};
  ::stat(path.c_str(), &info);
  std::int64_t bytes = 0;
  for (const auto* group : {&c.model, &c.optimizer, &c.extra})
    for (const auto& [name, t] : *group)
      bytes += t.numel() * static_cast<std::int64_t>(t.element_size());
  if (bytes > info.st_size)
    fail("read " + std::to_string(bytes) + " bytes of tensors from a file of " +
         std::to_string(info.st_size));
  if (expected == nullptr) return;
  for (const auto& [name, t] : c.model) {
    auto found = expected->tensors.find("model/" + name);
    if (found == expected->tensors.end()) continue;
    std::vector<std::int64_t> dims(t.sizes().begin(), t.sizes().end());
    if (dims != found->second.first) fail("model/" + name + " read with a shape the model refuses");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Scratch scratch = [] {
    mb::log::setLevel("off");
    at::set_num_threads(1);
    mb::h5::silenceLibraryErrors();
    return setUp();
  }();
  static const mb::train::ExpectedTensors expected = [] {
    mb::train::ExpectedTensors e;
    e.source = "the fuzzer's model";
    e.tensors["model/body.0.weight"] = {{4, 3}, "float32"};
    e.tensors["model/body.0.bias"] = {{4}, "float32"};
    return e;
  }();
  Choices in(data, size);
  {
    std::lock_guard<std::recursive_mutex> lock(mb::h5::libraryMutex());
    writeInput(in, scratch);
  }
  expectCheckpointErrorOrSuccess(
      [&] { checkRead(mb::train::readCheckpointFile(scratch.file), scratch.file, nullptr); });
  expectCheckpointErrorOrSuccess([&] {
    checkRead(mb::train::readCheckpointFile(scratch.file, &expected), scratch.file, &expected);
  });
  // inspect and resume: the config must describe the tensors, within the file's memory bound
  // (a model built past -malloc_limit_mb ends the run).
  expectCheckpointErrorOrSuccess([&] { mb::train::checkConfigDescribesTensors(scratch.file); });
  expectCheckpointErrorOrSuccess([&] {
    std::string text = mb::train::describeCheckpoint(scratch.file);
    if (text.find("all checksums verified") == std::string::npos)
      fail("inspect loaded a checkpoint without saying its checksums were verified");
  });
  return 0;
}
