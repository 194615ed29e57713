#include "train/Checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
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
#include "megabatch/Version.h"

namespace mb::train {
namespace fs = std::filesystem;
namespace {

constexpr ExitCode kCode = ExitCode::kCheckpoint;

void fsyncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0)
    throw CheckpointError("cannot open " + path + " to flush it: " + std::strerror(errno));
  int status = ::fsync(fd);
  int error = errno;
  ::close(fd);
  if (status != 0) throw CheckpointError("fsync of " + path + " failed: " + std::strerror(error));
}

std::string parentOf(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// What to do about a failed write of `path` (errno `error`, 0 if unknown).
std::string writeHint(const std::string& path, int error) {
  const std::string dir = parentOf(path);
  std::error_code ec;
  auto space = fs::space(dir, ec);
  if (error == ENOSPC || error == EDQUOT || (error == 0 && !ec && space.available < (64u << 20)))
    return "the disk holding " + dir +
           " is full: free space there (old runs, a smaller run.keep_last) or set "
           "run.dir to a larger disk, then re-run the same command to resume";
  return "check that " + dir + " is writable and has free space";
}

// Moves `tmp` over `path` and makes the rename durable.
void commitFile(const std::string& tmp, const std::string& path) {
  fsyncPath(tmp, false);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw CheckpointError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  fsyncPath(parentOf(path), true);
}

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

// Reads every dataset below `group` (recursively), naming them "a/b" relative to it. We
// never write a group twice, so one reached again (a link into itself) is a corrupt file, and
// following it would recurse until the stack overflows.
void readNamed(hid_t loc, const std::string& prefix, NamedTensors& out,
               std::set<std::string>& seen) {
  if (!seen.insert(h5::objectKey(loc, ".", kCode)).second)
    throw CheckpointError(h5::fileNameOf(loc) + ": group /" + prefix +
                          " is linked more than once (a cycle): not a checkpoint megabatch wrote");
  for (const auto& name : h5::listGroup(loc)) {
    if (h5::isGroup(loc, name)) {
      h5::Handle sub = h5::openGroup(loc, name, kCode);
      readNamed(sub.get(), prefix + name + "/", out, seen);
    } else {
      out.emplace_back(prefix + name, h5::readTensor(loc, name, kCode));
    }
  }
}

void readNamed(hid_t group, NamedTensors& out) {
  std::set<std::string> seen;
  readNamed(group, "", out, seen);
}

void writeTrainerState(hid_t file, const TrainerState& s) {
  h5::Handle g = h5::createGroup(file, "trainer", kCode);
  auto put = [&](const char* name, std::int64_t value) {
    h5::writeAttribute(g.get(), name, value, kCode);
  };
  put("step", s.step);
  put("epoch", s.epoch);
  put("batch_in_epoch", s.batchInEpoch);
  put("samples_seen", s.samplesSeen);
  put("canonical_shards", s.canonicalShards);
  put("seed", s.seed);
  put("global_batch", s.globalBatch);
  put("bad_steps", s.badSteps);
  put("best_step", s.bestStep);
  put("evals_without_improvement", s.evalsWithoutImprovement);
  h5::writeAttribute(g.get(), "best_metric", s.bestMetric, kCode);
}

TrainerState readTrainerState(hid_t file) {
  h5::Handle g = h5::openGroup(file, "trainer", kCode);
  auto get = [&](const char* name) { return h5::readIntAttribute(g.get(), name, kCode); };
  TrainerState s;
  s.step = get("step");
  s.epoch = get("epoch");
  s.batchInEpoch = get("batch_in_epoch");
  s.samplesSeen = get("samples_seen");
  s.canonicalShards = get("canonical_shards");
  s.seed = get("seed");
  s.globalBatch = get("global_batch");
  s.badSteps = get("bad_steps");
  s.bestStep = get("best_step");
  s.evalsWithoutImprovement = get("evals_without_improvement");
  s.bestMetric = h5::readDoubleAttribute(g.get(), "best_metric", kCode);
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
                          detail::hdf5ErrorStack() + ")");
  writeMeta(file.get(), content);
  writeTrainerState(file.get(), content.trainer);
  writeNamed(file.get(), "model", content.model);
  writeNamed(file.get(), "optimizer", content.optimizer);
  writeNamed(file.get(), "extra", content.extra);
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0)
    throw CheckpointError(path + ": flushing the checkpoint failed (" + detail::hdf5ErrorStack() +
                          ")");
  file.close(kCode, path);
  out.size = endOfFile(out);
  if (out.size == 0 || out.size > out.capacity)
    throw CheckpointError(path + ": the checkpoint image built in memory is malformed");
  return out;
}

// Writes `bytes` to a new file at `path` and fsyncs it; on failure removes it and throws with
// errno's text.
void writeBytes(const std::string& path, const char* bytes, std::size_t count) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw CheckpointError("cannot create " + path + ": " + std::strerror(errno),
                          writeHint(path, errno));
  std::size_t done = 0;
  int error = 0;
  while (done < count && error == 0) {
    ssize_t n = ::write(fd, bytes + done, count - done);
    if (n > 0)
      done += static_cast<std::size_t>(n);
    else if (n < 0 && errno != EINTR)
      error = errno;
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    ::unlink(path.c_str());
    throw CheckpointError("cannot write " + path + " (" + std::to_string(done) + " of " +
                              std::to_string(count) + " bytes written): " + std::strerror(error),
                          writeHint(path, error));
  }
}

std::int64_t stepOfFile(const std::string& name) {
  static const std::regex pattern("step-([0-9]{8,})\\.h5");
  std::smatch match;
  if (!std::regex_match(name, match, pattern)) return -1;
  return std::stoll(match[1]);
}

}  // namespace

void writeFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw CheckpointError("cannot write " + tmp + " (disk full or not writable?)",
                            writeHint(tmp, 0));
    }
  }
  try {
    commitFile(tmp, path);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

void writeCheckpointFile(const std::string& path, const CheckpointContent& content) {
  std::string tmp = path + ".tmp";
  try {
    FileImage image;
    {
      std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
      image = buildImage(tmp, content);
    }
    writeBytes(tmp, image.data.get(), image.size);
    commitFile(tmp, path);
  } catch (const Error& error) {
    std::remove(tmp.c_str());
    throw CheckpointError("writing checkpoint " + path + " failed: " + error.message() +
                              ". The previous checkpoint is intact.",
                          error.hint().empty() ? writeHint(path, 0) : error.hint());
  }
}

CheckpointContent readCheckpointFile(const std::string& path) {
  std::lock_guard<std::recursive_mutex> lock(h5::libraryMutex());
  try {
    h5::Handle file = h5::openFile(path, false, kCode);
    CheckpointContent c;
    readMeta(file.get(), c);
    c.trainer = readTrainerState(file.get());
    h5::Handle model = h5::openGroup(file.get(), "model", kCode);
    readNamed(model.get(), c.model);
    h5::Handle optimizer = h5::openGroup(file.get(), "optimizer", kCode);
    readNamed(optimizer.get(), c.optimizer);
    h5::Handle extra = h5::openGroup(file.get(), "extra", kCode);
    readNamed(extra.get(), c.extra);
    return c;
  } catch (const Error& error) {
    throw CheckpointError(
        "checkpoint " + path + " is unreadable, corrupt, or truncated: " + error.message(),
        "an older checkpoint in the same directory is used automatically; "
        "`megabatch inspect` shows what a file contains");
  }
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
  std::ostringstream out;
  std::int64_t parameters = 0;
  std::int64_t bytes = 0;
  for (const auto& [name, t] : c.model) {
    parameters += t.numel();
    bytes += t.numel() * t.element_size();
  }
  const TrainerState& s = c.trainer;
  out << path << ": megabatch checkpoint (format " << c.formatVersion
      << "), all checksums verified\n"
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
      << "  data:         fingerprint " << c.dataFingerprint << "\n"
      << "  model:        " << savedModelKind(c.configYaml) << ", " << c.model.size()
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

CheckpointDirectory::CheckpointDirectory(std::string runDir, std::int64_t keepLast)
    : dir_((fs::path(runDir) / "checkpoints").string()), keepLast_(keepLast) {}

std::string CheckpointDirectory::stepPath(std::int64_t step) const {
  return (fs::path(dir_) / ("step-" + str::pad(step, 8) + ".h5")).string();
}

std::string CheckpointDirectory::bestPath() const {
  return (fs::path(dir_) / "best.h5").string();
}

std::string CheckpointDirectory::save(const CheckpointContent& content) {
  fs::create_directories(dir_);
  std::string path = stepPath(content.trainer.step);
  writeCheckpointFile(path, content);
  writeFileAtomically((fs::path(dir_) / "latest").string(),
                      fs::path(path).filename().string() + "\n");
  prune(fs::path(path).filename().string());
  return path;
}

void CheckpointDirectory::saveBest(const CheckpointContent& content) {
  fs::create_directories(dir_);
  writeCheckpointFile(bestPath(), content);
}

std::vector<std::string> CheckpointDirectory::stepFiles() const {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    std::string name = entry.path().filename().string();
    std::int64_t step = stepOfFile(name);
    if (step >= 0) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> files;
  for (auto& [step, path] : found)
    files.push_back(path);
  return files;
}

std::vector<std::string> CheckpointDirectory::removeUnfinishedWrites() const {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".tmp") continue;
    std::error_code removeError;
    fs::remove(entry.path(), removeError);
    if (removeError) {
      log::get("ckpt").warn("could not remove unfinished write {}: {}", entry.path().string(),
                            removeError.message());
      continue;
    }
    log::get("ckpt").warn(
        "removed {}, left by a write that did not finish (a killed or crashed run)",
        entry.path().string());
    removed.push_back(entry.path().string());
  }
  return removed;
}

std::string readLatestName(const std::string& dir) {
  std::ifstream in((fs::path(dir) / "latest").string());
  std::string name;
  std::getline(in, name);
  return str::trim(name);
}

void CheckpointDirectory::prune(const std::string& keep) {
  std::vector<std::string> files = stepFiles();
  for (std::size_t i = static_cast<std::size_t>(keepLast_); i < files.size(); ++i) {
    if (fs::path(files[i]).filename() == keep) continue;
    std::error_code ec;
    fs::remove(files[i], ec);
    if (ec) log::get("ckpt").warn("could not remove old checkpoint {}: {}", files[i], ec.message());
  }
}

std::optional<std::pair<std::string, CheckpointContent>> CheckpointDirectory::loadNewest() const {
  std::vector<std::string> candidates;
  std::string latest = readLatestName(dir_);
  if (!latest.empty()) candidates.push_back((fs::path(dir_) / latest).string());
  for (const auto& file : stepFiles()) {
    if (std::find(candidates.begin(), candidates.end(), file) == candidates.end())
      candidates.push_back(file);
  }
  if (candidates.empty()) return std::nullopt;
  std::vector<std::string> failures;
  for (const auto& path : candidates) {
    try {
      CheckpointContent content = readCheckpointFile(path);
      if (!failures.empty())
        log::get("ckpt").warn("falling back to {} (the newer checkpoint could not be loaded)",
                              path);
      return std::make_pair(path, std::move(content));
    } catch (const Error& error) {
      log::get("ckpt").warn("{}", error.message());
      failures.push_back(path);
    }
  }
  throw CheckpointError(
      "no checkpoint in " + dir_ + " can be loaded (" + std::to_string(failures.size()) +
          " tried: " + str::join(failures, ", ") + ")",
      "move the damaged files away to start over, or set run.resume to a good checkpoint");
}

}  // namespace mb::train
