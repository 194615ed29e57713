#pragma once
// TensorBoard event files of a run (Note [TensorBoard event files] in TensorBoard.cpp): rank 0
// writes, beside metrics.jsonl, every number of every record it writes there, as a scalar
// TensorBoard, `wandb sync` and tensorboardX's readers open.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mb::train {

class JsonRecord;
class RecordFile;

// CRC-32C (Castagnoli), and the masked form TensorBoard's record framing stores.
std::uint32_t crc32c(const void* data, std::size_t size);
std::uint32_t maskedCrc32c(const void* data, std::size_t size);

class TensorBoardWriter {
 public:
  // Writes into `directory` (created when needed) a file of its own, named as TensorBoard's
  // writers name theirs. It is opened at the first record, so a run with nothing left to train
  // leaves none. `resumeStep`: the checkpoint's step (0 for a new run); a resumed run's file
  // starts with a SessionLog START at the step after it. `configText`: the resolved config,
  // shown by TensorBoard's text plugin.
  TensorBoardWriter(std::string directory, std::int64_t resumeStep, std::string configText);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // The record's numbers as scalars at its step, in one event, flushed.
  void write(const JsonRecord& record);
  // The file written so far ("" before the first record).
  const std::string& path() const { return path_; }

 private:
  void open(double wallTime, std::int64_t step);
  void append(const std::string& event);

  std::string directory_;
  std::int64_t resumeStep_;
  std::string configText_;
  std::string path_;
  std::unique_ptr<RecordFile> file_;  // Note [Records held while the disk is full]
};

}  // namespace mb::train
