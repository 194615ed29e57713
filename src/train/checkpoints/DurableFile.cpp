// Durable writes (Note [Atomic checkpoint writes] in DurableFile.h).
#include "train/checkpoints/DurableFile.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/Error.h"

namespace mb::train {
namespace fs = std::filesystem;
namespace {

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

}  // namespace

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

// Writes `bytes` to a new file at `path` and fsyncs it; on failure removes it and throws with
// errno's text.
void writeBytesDurably(const std::string& path, const char* bytes, std::size_t count) {
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

}  // namespace mb::train
