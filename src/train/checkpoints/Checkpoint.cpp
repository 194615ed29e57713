#include "train/checkpoints/Checkpoint.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include <ATen/Functions.h>

#include "common/Check.h"
#include "common/Error.h"
#include "common/Hdf5.h"
#include "common/Log.h"
#include "common/Strings.h"
#include "common/TorchCompat.h"
#include "data/pipeline/DataIdentity.h"
#include "dist/FaultInjection.h"
#include "megabatch/Version.h"
#include "train/checkpoints/CheckpointVerify.h"
#include "train/checkpoints/DurableFile.h"

namespace mb::train {
namespace {

constexpr ExitCode kCode = ExitCode::kCheckpoint;
// The most target terms or classes /meta records figures for (Note [The train mean of an
// evaluation]); a file that claims more is refused, not read.
constexpr std::size_t kMaxRecordedValues = std::size_t{1} << 20;

std::string nowText() {
  std::time_t now = std::time(nullptr);
  char buffer[64];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
  return buffer;
}

void writeNamed(hid_t file, const std::string& group, const NamedTensors& tensors) {
  h5::Handle handle = h5::createGroup(file, group, kCode);
  h5::WriteOptions options;
  options.fletcher32 = true;
  for (const auto& [name, tensor] : tensors) {
    auto slash = name.rfind('/');
    if (slash == std::string::npos) {
      h5::writeTensor(handle.get(), name, tensor, options, kCode);
    } else {
      std::string subgroup = name.substr(0, slash);
      if (!h5::exists(handle.get(), subgroup)) h5::createGroup(handle.get(), subgroup, kCode);
      h5::Handle sub = h5::openGroup(handle.get(), subgroup, kCode);
      h5::writeTensor(sub.get(), name.substr(slash + 1), tensor, options, kCode);
    }
  }
}

void writeTrainerState(hid_t file, const TrainerState& s) {
  h5::Handle g = h5::createGroup(file, "trainer", kCode);
  for (const TrainerStateField& field : trainerStateFields()) {
    if (field.integer != nullptr) {
      h5::writeAttribute(g.get(), field.name, s.*field.integer, kCode);
    } else {
      h5::writeAttribute(g.get(), field.name, s.*field.real, kCode);
    }
  }
}

TrainerState readTrainerState(hid_t file) {
  h5::Handle g = h5::openGroup(file, "trainer", kCode);
  TrainerState s;
  for (const TrainerStateField& field : trainerStateFields()) {
    if (field.mayBeMissing && !h5::hasAttribute(g.get(), field.name)) continue;  // keep the default
    if (field.integer != nullptr) {
      s.*field.integer = h5::readIntAttribute(g.get(), field.name, kCode);
    } else {
      s.*field.real = h5::readDoubleAttribute(g.get(), field.name, kCode);
    }
  }
  return s;
}

void writeMeta(hid_t file, const CheckpointContent& c) {
  h5::Handle g = h5::createGroup(file, "meta", kCode);
  h5::writeAttribute(g.get(), "format_version", kCheckpointFormatVersion, kCode);
  h5::writeAttribute(g.get(), "config", c.configYaml, kCode);
  h5::writeAttribute(g.get(), "world_size", c.worldSize, kCode);
  h5::writeAttribute(g.get(), "megabatch_version", std::string(MEGABATCH_VERSION), kCode);
  h5::writeAttribute(g.get(), "torch_version", compat::torchVersion(), kCode);
  h5::writeAttribute(g.get(), "data_fingerprint", c.dataFingerprint, kCode);
  h5::writeAttribute(g.get(), "data_info", c.dataInfoYaml, kCode);
  h5::writeAttribute(g.get(), "saved_at", nowText(), kCode);
  h5::writeAttribute(g.get(), "optimizer", c.optimizerKind, kCode);
  h5::writeAttribute(g.get(), "optimizer_steps", c.optimizerSteps, kCode);
  h5::writeAttribute(g.get(), "lr", c.lr, kCode);
  const std::pair<const char*, const std::string*> optional[] = {
      {"data_identity", &c.dataIdentityYaml},
      {"data_changes", &c.dataChanges},
      {"init_from", &c.initFromYaml}};
  for (const auto& [name, value] : optional) {
    if (!value->empty()) h5::writeAttribute(g.get(), name, *value, kCode);
  }
  if (!c.trainTargetMean.empty())
    h5::writeAttribute(g.get(), "train_target_mean", c.trainTargetMean, kCode);
  if (!c.trainClassCounts.empty())
    h5::writeAttribute(g.get(), "train_class_counts", c.trainClassCounts, kCode);
}

void readMeta(hid_t file, CheckpointContent& c) {
  h5::Handle g = h5::openGroup(file, "meta", kCode);
  c.formatVersion = h5::readIntAttribute(g.get(), "format_version", kCode);
  if (c.formatVersion > kCheckpointFormatVersion)
    throw CheckpointError(h5::fileNameOf(file) + ": checkpoint format " +
                              std::to_string(c.formatVersion) +
                              " is newer than this megabatch understands (" +
                              std::to_string(kCheckpointFormatVersion) + ")",
                          "resume with the megabatch version that wrote it");
  c.configYaml = h5::readStringAttribute(g.get(), "config", kCode);
  c.worldSize = h5::readIntAttribute(g.get(), "world_size", kCode);
  c.megabatchVersion = h5::readStringAttribute(g.get(), "megabatch_version", kCode);
  c.torchVersion = h5::readStringAttribute(g.get(), "torch_version", kCode);
  c.dataFingerprint = h5::readStringAttribute(g.get(), "data_fingerprint", kCode);
  c.dataInfoYaml = h5::readStringAttribute(g.get(), "data_info", kCode);
  c.savedAt = h5::readStringAttribute(g.get(), "saved_at", kCode);
  c.optimizerKind = h5::readStringAttribute(g.get(), "optimizer", kCode);
  c.optimizerSteps = h5::readIntAttribute(g.get(), "optimizer_steps", kCode);
  c.lr = h5::readDoubleAttribute(g.get(), "lr", kCode);
  const std::pair<const char*, std::string*> optional[] = {{"data_identity", &c.dataIdentityYaml},
                                                           {"data_changes", &c.dataChanges},
                                                           {"init_from", &c.initFromYaml}};
  for (const auto& [name, value] : optional) {
    if (h5::hasAttribute(g.get(), name)) *value = h5::readStringAttribute(g.get(), name, kCode);
  }
  // At most one value per target term or class: bounded before anything is allocated.
  if (h5::hasAttribute(g.get(), "train_target_mean"))
    c.trainTargetMean =
        h5::readArrayAttribute<double>(g.get(), "train_target_mean", kMaxRecordedValues, kCode);
  if (h5::hasAttribute(g.get(), "train_class_counts"))
    c.trainClassCounts = h5::readArrayAttribute<std::int64_t>(g.get(), "train_class_counts",
                                                              kMaxRecordedValues, kCode);
}

// Note [Checkpoints are built in memory]
// HDF5 1.10 cannot recover from a write error on disk (ENOSPC while flushing): the failed
// H5Fclose frees the file but keeps its id, and HDF5's shutdown (at MPI_Finalize or exit)
// closes it again and crashes. So the file is built in memory (core driver, no backing
// store), and its finished image is written with plain POSIX calls whose errors we handle.
// The image is taken at close through the file-image callbacks, not with H5Fget_file_image:
// in HDF5 1.10 that clears the superblock's status flags without updating its checksum, so
// the copy does not open. Rank 0 holds one extra copy of the checkpoint while it is written.
struct FileImage {
  std::unique_ptr<char, void (*)(void*)> data{nullptr, &std::free};
  std::size_t capacity = 0;  // bytes allocated by the core driver
  std::size_t size = 0;      // bytes of the file
};

// The core driver allocates the image through these; at close the buffer is kept, not freed.
namespace image {
void* allocate(std::size_t size, H5FD_file_image_op_t, void* udata) {
  auto* out = static_cast<FileImage*>(udata);
  out->data.reset(static_cast<char*>(std::malloc(size)));
  out->capacity = out->data ? size : 0;
  return out->data.get();
}
void* copy(void* dest, const void* src, std::size_t size, H5FD_file_image_op_t, void*) {
  return std::memcpy(dest, src, size);
}
void* resize(void* ptr, std::size_t size, H5FD_file_image_op_t, void* udata) {
  auto* out = static_cast<FileImage*>(udata);
  void* grown = std::realloc(ptr, size);
  if (grown == nullptr) return nullptr;  // ptr stays owned by out->data
  out->data.release();
  out->data.reset(static_cast<char*>(grown));
  out->capacity = size;
  return grown;
}
herr_t release(void* ptr, H5FD_file_image_op_t op, void* udata) {
  auto* out = static_cast<FileImage*>(udata);
  if (ptr == out->data.get() && op == H5FD_FILE_IMAGE_OP_FILE_CLOSE) return 0;  // the image we keep
  if (ptr == out->data.get()) out->data.release();
  std::free(ptr);
  return 0;
}
void* shareUdata(void* udata) {
  return udata;
}
herr_t keepUdata(void*) {
  return 0;
}
}  // namespace image

// The core driver's buffer grows in 16 MiB steps; the file itself ends at the "end of file
// address" that the superblock records (version 2 and 3, HDF5 file format spec: signature,
// version, offset size, length size, flags, then base, extension, and EOF addresses).
std::size_t endOfFile(const FileImage& image) {
  static const unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  const auto* bytes = reinterpret_cast<const unsigned char*>(image.data.get());
  if (bytes == nullptr || image.capacity < 48 || std::memcmp(bytes, kSignature, 8) != 0 ||
      bytes[8] < 2)
    return 0;
  const std::size_t offsetSize = bytes[9];
  const std::size_t at = 12 + 2 * offsetSize;
  if (offsetSize == 0 || offsetSize > 8 || at + offsetSize > image.capacity) return 0;
  std::uint64_t eof = 0;
  for (std::size_t i = 0; i < offsetSize; ++i)
    eof |= std::uint64_t{bytes[at + i]} << (8 * i);
  return static_cast<std::size_t>(eof);
}

FileImage buildImage(const std::string& path, const CheckpointContent& content) {
  FileImage out;
  h5::Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  H5Pset_fapl_core(fapl.get(), std::size_t{16} << 20, /*backing_store=*/0);
  H5FD_file_image_callbacks_t callbacks{
      &image::allocate,  &image::copy, &image::resize, &image::release, &image::shareUdata,
      &image::keepUdata, &out};
  H5Pset_file_image_callbacks(fapl.get(), &callbacks);
  h5::silenceLibraryErrors();
  h5::Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  if (!file.valid())
    throw CheckpointError(path + ": cannot create the checkpoint in memory (" +
                          mb::detail::hdf5ErrorStack() + ")");
  writeMeta(file.get(), content);
  writeTrainerState(file.get(), content.trainer);
  writeNamed(file.get(), "model", content.model);
  writeNamed(file.get(), "optimizer", content.optimizer);
  writeNamed(file.get(), "extra", content.extra);
  if (!content.logWindow.empty()) writeNamed(file.get(), "log_window", content.logWindow);
  {
    // The manifest (Note [Checkpoints are untrusted input]): what the file holds, for readers
    // that do not know the model (`megabatch inspect`, resume before the model is built).
    std::vector<CheckedTensor> tensors = verifyCheckpointTree(file.get(), path, nullptr, false);
    h5::Handle meta = h5::openGroup(file.get(), "meta", kCode);
    h5::writeAttribute(meta.get(), "manifest", manifestText(tensors), kCode);
  }
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0)
    throw CheckpointError(path + ": flushing the checkpoint failed (" +
                          mb::detail::hdf5ErrorStack() + ")");
  file.close(kCode, path);
  out.size = endOfFile(out);
  if (out.size == 0 || out.size > out.capacity)
    throw CheckpointError(path + ": the checkpoint image built in memory is malformed");
  return out;
}

}  // namespace

void writeCheckpointFile(const std::string& path, const CheckpointContent& content) {
  std::string tmp = path + ".tmp";
  try {
    FileImage image;
    {
      std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
      image = buildImage(tmp, content);
    }
    writeBytesDurably(tmp, image.data.get(), image.size);
    dist::maybeSlowCheckpointWrite();  // a test hook (FaultInjection.h)
    commitFile(tmp, path);
  } catch (const Error& error) {
    std::remove(tmp.c_str());
    throw CheckpointError("writing checkpoint " + path + " failed: " + error.message() +
                              ". The previous checkpoint is intact.",
                          error.hint().empty() ? writeHint(path, 0) : error.hint());
  }
}

CheckpointContent readCheckpointFile(const std::string& path, const ExpectedTensors* expected) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  try {
    h5::Handle file = h5::openFile(path, false, kCode);
    // Note [Checkpoints are untrusted input]: everything is checked before anything is read.
    // /meta first (attributes only; openGroup refuses an external link to it), so a file that
    // is not a checkpoint at all says so.
    CheckpointContent c;
    readMeta(file.get(), c);
    std::vector<CheckedTensor> tensors = verifyCheckpointTree(file.get(), path, expected);
    c.trainer = readTrainerState(file.get());
    for (const auto& t : tensors) {
      auto slash = t.path.find('/');
      std::string group = t.path.substr(0, slash), name = t.path.substr(slash + 1);
      NamedTensors& into = group == "model"        ? c.model
                           : group == "optimizer"  ? c.optimizer
                           : group == "log_window" ? c.logWindow
                                                   : c.extra;
      into.emplace_back(name, h5::readTensor(file.get(), t.path, kCode));
    }
    return c;
  } catch (const HostileCheckpointError& error) {
    throw HostileCheckpointError("checkpoint " + error.message(), error.hint());
  } catch (const Error& error) {
    throw CheckpointError(
        "checkpoint " + path + " is unreadable, corrupt, or truncated: " + error.message(),
        "an older checkpoint in the same directory is used automatically; "
        "`megabatch inspect` shows what a file contains");
  }
}

CheckpointContent readCheckpointHeader(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  try {
    h5::Handle file = h5::openFile(path, false, kCode);
    CheckpointContent c;
    readMeta(file.get(), c);  // openGroup refuses an external link to /meta
    c.trainer = readTrainerState(file.get());
    return c;
  } catch (const Error& error) {
    throw CheckpointError(
        "checkpoint " + path + " is unreadable, corrupt, or truncated: " + error.message(),
        "`megabatch inspect` shows what a file contains");
  }
}

CheckpointContent readCheckpointFile(const std::string& path) {
  return readCheckpointFile(path, nullptr);
}

bool isCheckpointFile(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  if (!h5::isHdf5File(path)) return false;
  try {
    h5::Handle file = h5::openFile(path, false, kCode);
    return h5::isGroup(file.get(), "meta") && h5::isGroup(file.get(), "model");
  } catch (const Error&) {
    return false;
  }
}

namespace {

// The model kind from the resolved config saved in the checkpoint; "model kind unknown" when a
// hand-made file carries no config.
std::string savedModelKind(const std::string& configYaml) {
  try {
    const YAML::Node kind = YAML::Load(configYaml)["model"]["kind"];
    if (kind && kind.IsScalar()) return kind.as<std::string>();
  } catch (const YAML::Exception&) {
  }
  return "model kind unknown";
}

}  // namespace

std::string describeCheckpoint(const std::string& path) {
  CheckpointContent c = readCheckpointFile(path);
  bool manifest = false;
  {
    std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
    h5::Handle file = h5::openFile(path, false, kCode);
    manifest = hasManifest(file.get());
  }
  std::ostringstream out;
  std::int64_t parameters = 0;
  std::int64_t bytes = 0;
  for (const auto& [name, t] : c.model) {
    parameters += t.numel();
    bytes += t.numel() * t.element_size();
  }
  const TrainerState& s = c.trainer;
  // Every tensor was refused unless it carries Fletcher-32 (Note [Checkpoints are untrusted
  // input]), and HDF5 verified each chunk while reading it.
  out << path << ": megabatch checkpoint (format " << c.formatVersion
      << "), all checksums verified\n"
      << "  manifest:     "
      << (manifest ? "every tensor matches it"
                   : "none (written before manifests); every tensor fits in the file")
      << "\n"
      << "  saved:        " << c.savedAt << " by megabatch " << c.megabatchVersion << ", LibTorch "
      << c.torchVersion << ", world size " << c.worldSize << "\n"
      << "  position:     step " << s.step << ", epoch " << s.epoch << ", next batch "
      << s.batchInEpoch << ", samples seen " << s.samplesSeen << "\n"
      << "  data order:   V = " << s.canonicalShards << " canonical shards, seed " << s.seed
      << ", global batch " << s.globalBatch << " (resumable on 1.." << s.canonicalShards
      << " ranks)\n"
      << "  optimizer:    " << c.optimizerKind << ", " << c.optimizerSteps << " steps, lr " << c.lr
      << ", " << c.optimizer.size() << " state tensors\n"
      << "  early stop:   best " << s.bestMetric << " at step " << s.bestStep << ", "
      << s.evalsWithoutImprovement << " evaluations since\n"
      << "  data:         fingerprint " << c.dataFingerprint << "\n";
  // Note [Warm starts], Note [Data continuity]
  if (auto identity = data::identityFromYaml(c.dataIdentityYaml)) {
    out << "  splits:       " << (identity->splitsByTime ? "by time" : "by fractions") << ", "
        << identity->samples << " samples\n";
    for (int s = 0; s < 3; ++s)
      out << "    " << data::toString(static_cast<data::Split>(s)) << " "
          << data::describeRange(identity->splits[s], identity->splitTimes[s], identity->timeUnit)
          << "\n";
  }
  if (!c.initFromYaml.empty()) out << "  started from: " << c.initFromYaml << "\n";
  if (!c.trainTargetMean.empty()) {
    out << "  train mean:   ";
    for (std::size_t k = 0; k < c.trainTargetMean.size() && k < 8; ++k)
      out << (k ? ", " : "") << c.trainTargetMean[k];
    out << (c.trainTargetMean.size() > 8 ? ", ..." : "")
        << " (the train split's mean target: eval's train-mean baseline)\n";
  }
  if (!c.dataChanges.empty())
    out << "  data changes: accepted by run.allow_data_change:\n    "
        << str::join(str::split(c.dataChanges, '\n'), "\n    ") << "\n";
  out << "  model:        " << savedModelKind(c.configYaml) << ", " << c.model.size()
      << " tensors, " << parameters << " values (" << str::humanBytes(static_cast<double>(bytes))
      << ")\n";
  for (const auto& [name, t] : c.model)
    out << "    " << name << " " << t.sizes() << "\n";
  if (!c.extra.empty()) {
    out << "  extra state:\n";
    for (const auto& [name, t] : c.extra)
      out << "    " << name << " " << t.sizes() << "\n";
  }
  return out.str();
}

}  // namespace mb::train
