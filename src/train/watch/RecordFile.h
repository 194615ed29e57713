#pragma once
// An append-only file of whole records (metrics.jsonl's lines, TensorBoard's framed events).
//
// Note [Records held while the disk is full]
// A full disk under run.dir used to cost records for good: metrics.jsonl's stream went bad at
// the first failed write and wrote nothing more for the rest of the run, and the TensorBoard
// file was closed, while training went on (the fault soak found both). Now a record that cannot
// be written whole is cut back off the file (no torn record is left) and held in memory, in
// order, with one warning; every later record first retries the held ones, and once the disk
// has room they are written, in order, with one line saying so. A process that dies with
// records held loses only records the resume writes again: the checkpoint that follows them
// needs the same disk, so the run resumes from an earlier step and trains them again. At most
// kMaxHeldBytes are held; beyond that the oldest are dropped, and the warning says how many.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

namespace mb::train {

class RecordFile {
 public:
  static constexpr std::size_t kMaxHeldBytes = std::size_t{64} << 20;

  // Opens `path` for appending (created when missing); RuntimeError when it cannot be. `what`
  // names the file in messages ("metrics.jsonl").
  RecordFile(std::string path, std::string what);
  ~RecordFile();
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  // Appends `record` whole after the records held, or holds it.
  void append(std::string record);
  std::size_t held() const { return held_.size(); }

 private:
  bool writeWhole(const std::string& record);
  void hold(std::string record, int error);

  std::string path_;
  std::string what_;
  int fd_ = -1;
  std::deque<std::string> held_;
  std::size_t heldBytes_ = 0;
  std::int64_t dropped_ = 0;
};

}  // namespace mb::train
