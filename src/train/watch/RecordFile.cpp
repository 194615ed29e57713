#include "train/watch/RecordFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/Error.h"
#include "train/watch/TrainLog.h"

namespace mb::train {

RecordFile::RecordFile(std::string path, std::string what)
    : path_(std::move(path)), what_(std::move(what)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw RuntimeError("cannot open " + path_ + " for writing: " + std::strerror(errno),
                       "check that run.dir is writable");
}

RecordFile::~RecordFile() {
  if (!held_.empty())
    trainLog().warn(
        "{}: {} record(s) held while its disk was full are lost: {} could not be "
        "written before the end",
        what_, held_.size(), path_);
  if (fd_ >= 0) ::close(fd_);
}

// Note [Records held while the disk is full]: all of `record`, or none of it.
bool RecordFile::writeWhole(const std::string& record) {
  struct stat before {};
  if (::fstat(fd_, &before) != 0) return false;
  std::size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      const int error = n < 0 ? errno : ENOSPC;
      if (done > 0 && ::ftruncate(fd_, before.st_size) != 0) {
        // Cannot cut the torn part back: a reader skips a torn record, and the next one starts
        // on a new line (metrics.jsonl) or a new frame.
      }
      errno = error;
      return false;
    }
  }
  return true;
}

void RecordFile::hold(std::string record, int error) {
  if (held_.empty())
    trainLog().warn(
        "cannot write {} ({}): {}; its records are held in memory and written once the disk "
        "has room. Free space under run.dir",
        what_, path_, std::strerror(error));
  heldBytes_ += record.size();
  held_.push_back(std::move(record));
  while (heldBytes_ > kMaxHeldBytes && held_.size() > 1) {
    heldBytes_ -= held_.front().size();
    held_.pop_front();
    if (dropped_++ == 0)
      trainLog().warn("{}: more than {} MiB of records held; the oldest are dropped", what_,
                      kMaxHeldBytes >> 20);
  }
}

void RecordFile::append(std::string record) {
  const std::size_t wereHeld = held_.size();
  while (!held_.empty()) {
    if (!writeWhole(held_.front())) {
      hold(std::move(record), errno);
      return;
    }
    heldBytes_ -= held_.front().size();
    held_.pop_front();
  }
  if (!writeWhole(record)) {
    hold(std::move(record), errno);
    return;
  }
  if (wereHeld > 0)
    trainLog().info("{}: the {} record(s) held while its disk was full are written{}", what_,
                    wereHeld,
                    dropped_ > 0 ? fmt::format(" ({} older ones were dropped)", dropped_) : "");
  dropped_ = 0;
}

}  // namespace mb::train
